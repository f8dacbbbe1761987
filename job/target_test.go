package job

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTarget_Normalize(t *testing.T) {
	t.Parallel()
	base := func(tg *Target) *Job {
		return &Job{ID: "a", Target: tg, Schedule: Schedule{Now: true}}
	}
	j := base(&Target{URL: "https://example.com/hook", Headers: map[string]string{"x-api-key": "k"}})
	require.NoError(t, j.Normalize(0))
	require.Equal(t, PushType, j.Type)
	require.Equal(t, DefaultPushQueue, j.Queue)
	require.Equal(t, "POST", j.Target.Method)
	require.Equal(t, DefaultTargetTimeout, j.Target.Timeout)
	require.Equal(t, map[string]string{"X-Api-Key": "k"}, j.Target.Headers)

	for _, tc := range []struct {
		name  string
		job   *Job
		field string
	}{
		{"TypeAndTarget", &Job{ID: "a", Type: "mail", Target: &Target{URL: "https://e.com"}, Schedule: Schedule{Now: true}}, "type"},
		{"ReservedType", &Job{ID: "a", Type: PushType, Schedule: Schedule{Now: true}}, "type"},
		{"NoURL", base(&Target{}), "target.url"},
		{"Scheme", base(&Target{URL: "ftp://e.com/x"}), "target.url"},
		{"NoHost", base(&Target{URL: "https:///x"}), "target.url"},
		{"UserInfo", base(&Target{URL: "https://u:p@e.com/x"}), "target.url"},
		{"Relative", base(&Target{URL: "/x"}), "target.url"},
		{"LongURL", base(&Target{URL: "https://e.com/" + strings.Repeat("a", MaxTargetURLLen)}), "target.url"},
		{"Method", base(&Target{URL: "https://e.com", Method: "TRACE"}), "target.method"},
		{"ShortTimeout", base(&Target{URL: "https://e.com", Timeout: time.Millisecond}), "target.timeout"},
		{"LongTimeout", base(&Target{URL: "https://e.com", Timeout: 2 * time.Hour}), "target.timeout"},
		{"HopByHop", base(&Target{URL: "https://e.com", Headers: map[string]string{"connection": "close"}}), "target.headers.connection"},
		{"TransferEncoding", base(&Target{URL: "https://e.com", Headers: map[string]string{"Transfer-Encoding": "chunked"}}), "target.headers.Transfer-Encoding"},
		{"Host", base(&Target{URL: "https://e.com", Headers: map[string]string{"Host": "x"}}), "target.headers.Host"},
		{"Proxy", base(&Target{URL: "https://e.com", Headers: map[string]string{"Proxy-Foo": "x"}}), "target.headers.Proxy-Foo"},
		{"Tock", base(&Target{URL: "https://e.com", Headers: map[string]string{"Tock-Signature": "x"}}), "target.headers.Tock-Signature"},
		{"BadName", base(&Target{URL: "https://e.com", Headers: map[string]string{"a b": "x"}}), "target.headers.a b"},
		{"BadValue", base(&Target{URL: "https://e.com", Headers: map[string]string{"A": "x\r\nB: y"}}), "target.headers.A"},
		{"Duplicate", base(&Target{URL: "https://e.com", Headers: map[string]string{"a": "x", "A": "y"}}), "target.headers.a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.job.Normalize(0)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field, fe.Error())
		})
	}
}
