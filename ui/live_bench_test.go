package ui_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/ui"
)

// cpuTime is the process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLive_Workflow10k is the live update of the page of a workflow of 10,000
// nodes (a fan-out: every node released, so every node's job is read too), on a real
// redis-server: a check of the stream when nothing changed (Unchanged), and one after a
// node changed (Changed: a node's run is claimed, ready to running, then ended, running
// to succeeded, one step before each check). It reports the bytes the stream sends a
// check (sent-B/op) and the CPU time of the process (cpu-ms/op: the dashboard and the
// API it reads in-process, not Redis, which runs in its own process). Run it with
// go test ./ui -run '^$' -bench Live_Workflow10k -benchtime 20x.
func BenchmarkLive_Workflow10k(b *testing.B) {
	tb := setup(b, redistest.ServerBackend(b), nil, ui.Config{})
	ctx := context.Background()
	const wf = "fan"
	w := &job.Workflow{ID: wf}
	for i := range job.DefaultMaxNodes {
		w.Jobs = append(w.Jobs, wfNode("n"+strconv.Itoa(i), ""))
	}
	_, err := tb.store.CreateWorkflow(ctx, w)
	require.NoError(b, err)
	sh := tb.store.ShardOf(wf)

	measure := func(b *testing.B, change func()) {
		s, err := tb.ui.NewLiveStream("/ui/workflows/"+wf, "")
		require.NoError(b, err)
		_, err = s.Next(ctx) // the stream's first check
		require.NoError(b, err)
		var sent int
		var cpu time.Duration
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			change()
			c0 := cpuTime(b)
			b.StartTimer()
			u, err := s.Next(ctx)
			b.StopTimer()
			cpu += cpuTime(b) - c0
			require.NoError(b, err)
			sent += len(u)
			b.StartTimer()
		}
		b.ReportMetric(float64(sent)/float64(b.N), "sent-B/op")
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	}
	b.Run("Unchanged", func(b *testing.B) { measure(b, func() {}) })
	b.Run("Changed", func(b *testing.B) {
		var running []shard.Claimed
		measure(b, func() {
			if len(running) > 0 { // the node claimed before ends: running to succeeded
				errs, err := tb.store.FinishRuns(ctx, sh, []shard.Finish{{Member: running[0].Member, Token: running[0].Token, Outcome: shard.Succeeded}})
				require.NoError(b, err)
				require.NoError(b, errs[0])
				running = nil
				return
			}
			running, err = tb.store.Claim(ctx, sh, "default", 1, "w1", "n1") // ready to running
			require.NoError(b, err)
			require.Len(b, running, 1)
		})
	})
}
