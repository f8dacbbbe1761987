package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/shard"
)

func TestJobs_CreateDryRun(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	// 02:30 on March Sundays in New York: every March's second Sunday is the day the
	// clocks jump from 02:00 to 03:00, and any 10 of these fire times span two Marches.
	r := b.run(t, "", "jobs", "create", "--type", "report", "--cron", "30 2 * 3 0", "--tz", "America/New_York", "--dry-run")
	require.NoError(t, r.err, r.errOut)
	require.Contains(t, r.errOut, "dry run: nothing created")
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 11, r.out)
	require.Regexp(t, `^FIRES AT\s+DAYLIGHT SAVING$`, lines[0])
	require.Contains(t, r.out, "03:00:00 EDT (-04:00)  moved: 02:30 does not exist on")

	p := decodeJSON[ingest.SchedulePreview](t, b.ok(t, "jobs", "create", "--type", "r", "--cron", "@daily", "--dry-run", "--json"))
	require.Equal(t, "UTC", p.Timezone)
	require.Len(t, p.Fires, 10)

	// Nothing was created.
	l, err := b.store.List(t.Context(), shardListAll())
	require.NoError(t, err)
	require.Empty(t, l.Jobs)

	r = b.run(t, "", "jobs", "create", "--type", "r", "--now", "--dry-run")
	require.ErrorContains(t, r.err, "--dry-run previews a --cron schedule")
	r = b.run(t, "", "jobs", "create", "--type", "r", "--cron", "61 * * * *", "--dry-run")
	require.ErrorContains(t, r.err, "out of range")
}

func shardListAll() shard.ListFilter { return shard.ListFilter{} }
