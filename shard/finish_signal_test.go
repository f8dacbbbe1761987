package shard_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// subscribed subscribes to channels and returns their messages, once a message published
// to each of them came back (a subscription is not confirmed to its caller).
func subscribed(ctx context.Context, t *testing.T, s *shard.Store, channels ...string) <-chan [2]string {
	t.Helper()
	got := make(chan [2]string, 64)
	// A probe can come back after the one that confirmed its channel (one is published
	// every 50 ms until one comes): once all are confirmed, probes are no signal.
	var confirmed atomic.Bool
	go func() {
		_ = s.Subscribe(ctx, channels, func(ch, msg string) {
			if msg == "probe" && confirmed.Load() {
				return
			}
			got <- [2]string{ch, msg}
		})
	}()
	c := s.Client()
	for _, ch := range channels {
		for k := 0; ; k++ {
			require.Less(t, k, 100, "no subscription to %s", ch)
			require.NoError(t, c.Do(ctx, c.B().Publish().Channel(ch).Message("probe").Build()).Error())
			select {
			case m := <-got:
				if m[0] != ch || m[1] != "probe" {
					continue
				}
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
	}
	confirmed.Store(true)
	for len(got) > 0 {
		<-got
	}
	return got
}

// A finish_runs call that fails after part of its work (here an entry whose job key is
// of the wrong type) has still made runs ready and filed retries: the workers of their
// queues and the shard's dispatcher are signalled all the same, or a released child would
// wait for the workers' sweep and a retry for the dispatcher's next wake-up. Before the
// fix the signals left only with the call's reply, which an error has none of.
func TestFinishRuns_SignalsWhatAFailedCallFiled(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := open(t, b, shard.Config{Shards: 1})
		c := b.Client(t)
		a := node("a")
		a.Queue = "qa"
		child := node("b", "a")
		child.Queue = "qb"
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: []job.Node{a, child}})
		require.NoError(t, err)
		_, err = s.Create(ctx, []*job.Job{{ID: "r", Type: "t", Queue: "qr", Schedule: job.Schedule{Now: true},
			Retry: job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second}}})
		require.NoError(t, err)
		require.NoError(t, c.Do(ctx, c.B().Set().Key(s.Keys().Job(0, "bogus")).Value("x").Build()).Error())
		ca, err := s.Claim(ctx, 0, "qa", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, ca, 1)
		cr, err := s.Claim(ctx, 0, "qr", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, cr, 1)

		got := subscribed(ctx, t, s, s.Keys().ReadyChannel("qb"), s.Keys().WakeChannel())
		_, err = s.FinishRuns(ctx, 0, []shard.Finish{
			{Member: ca[0].Member, Token: ca[0].Token, Outcome: shard.Succeeded},
			{Member: cr[0].Member, Token: cr[0].Token, Outcome: shard.Failed, Error: "again"},
			{Member: shard.RunMember("bogus", 1), Token: "t", Outcome: shard.Failed, Error: "no"},
		})
		require.Error(t, err, "the bogus entry fails the call")

		want := map[string]bool{s.Keys().ReadyChannel("qb"): true, s.Keys().WakeChannel(): true}
		for len(want) > 0 {
			select {
			case m := <-got:
				require.True(t, strings.HasPrefix(m[1], "0 "), "%s: %s", m[0], m[1])
				delete(want, m[0])
			case <-time.After(2 * time.Second):
				t.Fatalf("no signal on %v after the failed call", want)
			}
		}
		next, err := s.Claim(ctx, 0, "qb", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, next, 1, "b's run is ready")
	})
}

// finish_runs publishes its signals from its script: one ready signal per queue that got
// runs in a call (here two children released in one queue), stamped with a time no later
// than a claim that finds them; none after it (the caller publishes nothing more); a
// reap's retry earlier than the shard's runs wakes its dispatcher with the retry's time;
// a reap without the lease publishes nothing. Coverage of the signals' move into the
// script: no bug found.
func TestFinishRuns_SignalsOnceFromTheScript(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := open(t, b, shard.Config{Shards: 1})
		a := node("a")
		a.Queue = "qa"
		kids := []job.Node{node("b", "a"), node("c", "a")}
		for k := range kids {
			kids[k].Queue = "qb"
		}
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: append([]job.Node{a}, kids...)})
		require.NoError(t, err)
		_, err = s.Create(ctx, []*job.Job{{ID: "r", Type: "t", Queue: "qr", Schedule: job.Schedule{Now: true},
			Visibility: time.Second, Retry: job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}}})
		require.NoError(t, err)
		ca, err := s.Claim(ctx, 0, "qa", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, ca, 1)
		cr, err := s.Claim(ctx, 0, "qr", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, cr, 1)
		lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
		require.True(t, lease.Held)

		got := subscribed(ctx, t, s, s.Keys().ReadyChannel("qb"), s.Keys().ReadyChannel("qr"), s.Keys().WakeChannel())
		// next returns the next signal, or ok false after wait.
		next := func(wait time.Duration) (m [2]string, ok bool) {
			select {
			case m = <-got:
				return m, true
			case <-time.After(wait):
				return m, false
			}
		}
		quiet := func(what string) {
			t.Helper()
			if m, ok := next(300 * time.Millisecond); ok {
				t.Fatalf("%s: a signal more: %s %s", what, m[0], m[1])
			}
		}
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: ca[0].Member, Token: ca[0].Token, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		m, ok := next(2 * time.Second)
		require.True(t, ok, "no ready signal")
		require.Equal(t, s.Keys().ReadyChannel("qb"), m[0], m[1])
		id, at, parsed := shard.ParseReady(m[1], 1)
		require.True(t, parsed, m[1])
		require.Equal(t, shard.ID(0), id)
		quiet("after the ack")
		runs, err := s.Claim(ctx, 0, "qb", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, runs, 2)
		require.GreaterOrEqual(t, runs[0].ClaimedAt.UnixMicro(), at/1000*1000, "the claim that finds them comes after the signal's time")

		stale := lease.Lease
		stale.Epoch++
		_, err = s.Reap(ctx, stale, 10)
		require.ErrorIs(t, err, shard.ErrLeaseLost)
		require.Eventually(t, func() bool {
			n, err := s.Reap(ctx, lease.Lease, 10)
			require.NoError(t, err)
			return n == 1
		}, 10*time.Second, 50*time.Millisecond)
		m, ok = next(2 * time.Second)
		require.True(t, ok, "no wake signal after the reap")
		require.Equal(t, s.Keys().WakeChannel(), m[0])
		wid, due, parsed := shard.ParseWake(m[1])
		require.True(t, parsed, m[1])
		require.Equal(t, shard.ID(0), wid)
		require.Positive(t, due)
		quiet("after the reap")
	})
}
