package dispatcher

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/shard"
)

func TestPlanner_Plan(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	min := int64(time.Minute / time.Millisecond)
	cron := func(mf string) shard.DueEntry {
		return shard.DueEntry{Member: "j:1", Due: base, Score: base, Kind: shard.KindCron, Cron: "* * * * *",
			TZ: "UTC", Version: "1", Misfire: mf, MisfireAfter: time.Minute}
	}
	tests := []struct {
		name   string
		entry  shard.DueEntry
		now    int64
		fires  []int64
		missed int
		next   int64
	}{
		{"OnTime", cron("run_once"), base + 5, []int64{base}, 0, base + min},
		{"LateWithinThreshold", cron("run_once"), base + min, []int64{base}, 0, base + min},
		{"RunOnceAfterOutage", cron("run_once"), base + 10*min + 30000, []int64{base + 10*min}, 10, base + 11*min},
		{"SkipAfterOutage", cron("skip"), base + 10*min + 30000, nil, 11, base + 11*min},
		{"RunAllAfterOutage", cron("run_all"), base + 3*min + 1, []int64{base, base + min, base + 2*min, base + 3*min}, 0, base + 4*min},
		{"OneTime", shard.DueEntry{Member: "j:1", Due: base, Kind: shard.KindOnce}, base + 10*min, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPlanner().plan(tt.entry, tt.now)
			require.Equal(t, tt.fires, p.Fires)
			require.Equal(t, tt.missed, p.Missed)
			require.Equal(t, tt.next, p.Next)
		})
	}
}

func TestPlanner_RunAllBounded(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	e := shard.DueEntry{Member: "j:1", Due: base, Score: base, Kind: shard.KindCron, Cron: "* * * * *",
		Misfire: "run_all", MisfireAfter: time.Minute}
	now := base + int64(24*time.Hour/time.Millisecond)
	p := newPlanner().plan(e, now)
	require.Len(t, p.Fires, 100)
	require.Equal(t, 24*60+1-100, p.Missed)
	// The newest occurrences fire (job.MaxRunAll's doc: older ones are recorded as missed),
	// so the missed entry, which names e.Due, names one that did not run.
	min := int64(time.Minute / time.Millisecond)
	require.Equal(t, now-99*min, p.Fires[0])
	require.Equal(t, now, p.Fires[99])
	require.NotContains(t, p.Fires, e.Due)
}

func TestPlanner_RunAllNewestBeyondTheWalk(t *testing.T) {
	t.Parallel()
	// Every second for 5 hours: more occurrences than maxWalk.
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	now := base + int64(5*time.Hour/time.Millisecond) + 500
	for _, cron := range []string{"* * * * * *", "*/3 * 12-17 * * *", "* * 12,13,14,16,17 * * *"} {
		e := shard.DueEntry{Member: "j:1", Due: base, Score: base, Kind: shard.KindCron, Cron: cron,
			Misfire: "run_all", MisfireAfter: time.Minute}
		p := newPlanner().plan(e, now)
		require.Len(t, p.Fires, 100, cron)
		step := p.Fires[1] - p.Fires[0]
		require.LessOrEqual(t, now-p.Fires[99], step, "%s: the newest occurrence before now fires", cron)
		for i := 1; i < len(p.Fires); i++ {
			require.Equal(t, step, p.Fires[i]-p.Fires[i-1], "%s: consecutive occurrences", cron)
		}
		require.Greater(t, p.Missed, 0, cron)
		require.Greater(t, p.Next, now, cron)
	}
}

func TestAssign_EveryShardOnce(t *testing.T) {
	t.Parallel()
	for _, members := range [][]string{{"a"}, {"d1", "d12", "d2"}, {"x", "y", "z", "w", "v"}} {
		owners := map[int]int{}
		for _, m := range members {
			for id := range assign(append([]string(nil), members...), m, 64) {
				owners[int(id)]++
			}
		}
		require.Len(t, owners, 64, "members %v", members)
		for id, n := range owners {
			require.Equal(t, 1, n, "shard %d", id)
		}
	}
	// More dispatchers than shards: the extra ones stand by.
	mine := 0
	for _, m := range []string{"a", "b", "c"} {
		mine += len(assign([]string{"a", "b", "c"}, m, 2))
	}
	require.Equal(t, 2, mine)
}

// A schedule that fires in a burst long ago (every second of 1 January, looked at in
// February): the newest occurrences are the burst's last, not its first.
func TestPlanner_RunAllNewestOfABurst(t *testing.T) {
	t.Parallel()
	jan1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := shard.DueEntry{Member: "j:1", Due: jan1.UnixMilli(), Score: jan1.UnixMilli(), Kind: shard.KindCron,
		Cron: "* * * 1 1 *", Misfire: "run_all", MisfireAfter: time.Minute}
	p := newPlanner().plan(e, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	require.Len(t, p.Fires, 100)
	require.Equal(t, jan1.Add(24*time.Hour-time.Second).UnixMilli(), p.Fires[99])
	require.Equal(t, jan1.Add(24*time.Hour-100*time.Second).UnixMilli(), p.Fires[0])
}
