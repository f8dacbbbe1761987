package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A duration too long for time.Duration says so, wherever it is given, instead of a
// generic parse error.
func TestDuration_Overflow(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, "redis: 127.0.0.1:1\nbucket: 9999999999h\n")
	for _, tc := range []struct {
		env  map[string]string
		line string
		want string
	}{
		{nil, "jobs create --type t --delay 9999999999h", `--delay "9999999999h": out of range`},
		{nil, "jobs create --type t --now --timeout 99999999999m", `--timeout "99999999999m": out of range`},
		{nil, "jobs patch x --initial-backoff 9999999999h", `--initial-backoff "9999999999h": out of range`},
		{nil, "queues --watch --interval 9999999999h", `--interval "9999999999h": out of range`},
		{nil, "bench fire --window 9999999999h", `--window "9999999999h": out of range`},
		{nil, "server --redis 127.0.0.1:1 --lease-ttl 9999999999h", `--lease-ttl "9999999999h": out of range`},
		{nil, "dispatcher --redis 127.0.0.1:1 --snapshot-to x --snapshot-every 9999999999h", `--snapshot-every "9999999999h": out of range`},
		{map[string]string{"TOCK_SHUTDOWN_TIMEOUT": "99999999999999h"}, "server --redis 127.0.0.1:1", `TOCK_SHUTDOWN_TIMEOUT="99999999999999h" (env): out of range`},
		{map[string]string{"TOCK_CONFIG": file}, "init", `bucket "9999999999h": out of range`},
	} {
		env := map[string]string{"TOCK_API": "http://127.0.0.1:1"}
		for k, v := range tc.env {
			env[k] = v
		}
		code, out, errOut := execTock(t, env, strings.Fields(tc.line)...)
		require.Equal(t, 2, code, "tock %s\n%s%s", tc.line, out, errOut)
		require.Contains(t, errOut, tc.want, tc.line)
		require.Contains(t, errOut, "the longest duration is 2562047h47m16s (about 292 years)", tc.line)
	}
	// Below the limit, nothing changes.
	for _, v := range []string{"2562047h", "1.5h", "90s", "-1m"} {
		_, err := parseDurationText(v)
		require.NoError(t, err, v)
	}
	_, err := parseDurationText("soon")
	require.EqualError(t, err, `not a duration (such as 90s or 1h30m)`)
}
