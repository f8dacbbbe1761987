package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

const (
	pullWriter = "writer-secret-0123456789"
	pullReader = "reader-secret-0123456789"
	pullWorker = "worker-secret-0123456789"
)

// pullBundle is a server with write, read and worker tokens on a 2-shard store.
func pullBundle(t *testing.T, b redistest.Backend) *bundle {
	t.Helper()
	rc := b.Client(t)
	st, ns := openStore(t, b, rc, shard.Config{Shards: 2, ColdAfter: -1})
	return serve(t, b, rc, ns, ingest.Config{Store: st, Tokens: []ingest.Token{
		{Secret: pullWriter, Scope: ingest.ScopeWrite}, {Secret: pullReader, Scope: ingest.ScopeRead},
		{Secret: pullWorker, Scope: ingest.ScopeWorker}}})
}

// leases takes the leases of every shard of tb's store, as a dispatcher would.
func (tb *bundle) leases() []shard.Lease {
	tb.t.Helper()
	var out []shard.Lease
	for i := range tb.store.Shards() {
		l := tb.store.AcquireLeases(context.Background(), "d", []shard.ID{shard.ID(i)}, time.Hour)[0]
		require.True(tb.t, l.Held)
		out = append(out, l.Lease)
	}
	return out
}

func claimOne(t *testing.T, w *ingest.Client, req ingest.ClaimRequest) ingest.ClaimedRun {
	t.Helper()
	r, err := w.ClaimRuns(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, r.Runs, 1)
	return r.Runs[0]
}

// A run claimed over HTTP carries what a handler needs; its ack's result is then in the
// job's run history, JSON or bytes.
func TestRuns_ClaimAckResult(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb := pullBundle(t, b)
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		for _, id := range []string{"j1", "j2"} {
			_, _, err := wc.CreateJob(ctx, ingest.JobRequest{ID: id, Queue: "q", Type: "mail", Payload: json.RawMessage(`{"to":"a"}`),
				Schedule: ingest.Schedule{Now: true}, Visibility: "45s"}, "")
			require.NoError(t, err)
		}
		got, err := w.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Max: 10, Worker: "py-1"})
		require.NoError(t, err)
		require.Len(t, got.Runs, 2)
		byID := map[string]ingest.ClaimedRun{}
		for _, r := range got.Runs {
			byID[r.JobID] = r
			require.Equal(t, "q", r.Queue)
			require.Equal(t, "mail", r.Type)
			require.JSONEq(t, `{"to":"a"}`, string(r.Payload))
			require.Equal(t, 1, r.Attempt)
			require.NotEmpty(t, r.Token)
			require.Equal(t, "45s", r.Visibility)
			require.WithinRange(t, r.Deadline, r.Due.Add(44*time.Second), r.Due.Add(time.Minute))
			jobID, due, ok := shard.SplitMember(r.Run)
			require.True(t, ok)
			require.Equal(t, r.JobID, jobID)
			require.Equal(t, r.Due.UnixMilli(), due)
		}
		_, err = w.AckRun(ctx, byID["j1"].Run, byID["j1"].Token, []byte(`{"sent":true}`))
		require.NoError(t, err)
		_, err = w.AckRun(ctx, byID["j2"].Run, byID["j2"].Token, []byte{0, 1, 2, 0xff})
		require.NoError(t, err)

		runs, err := wc.Runs(ctx, "j1")
		require.NoError(t, err)
		require.Len(t, runs.Runs, 1)
		require.Equal(t, "succeeded", runs.Runs[0].Outcome)
		require.Equal(t, "py-1", runs.Runs[0].Worker)
		require.JSONEq(t, `{"sent":true}`, string(runs.Runs[0].Result))
		runs, err = wc.Runs(ctx, "j2")
		require.NoError(t, err)
		require.Equal(t, "AAEC/w==", runs.Runs[0].ResultBase64)

		// A second ack of the same run is refused: it is no longer held.
		_, err = w.AckRun(ctx, byID["j1"].Run, byID["j1"].Token, nil)
		requireAPIError(t, err, 409, ingest.CodeTokenMismatch)
	})
}

func requireAPIError(t *testing.T, err error, status int, code string) {
	t.Helper()
	var ae *ingest.APIError
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, status, ae.Status, "%v", err)
	require.Equal(t, code, ae.Detail.Code, "%v", err)
}

// A claim that finds nothing waits, and a job created meanwhile wakes it.
func TestRuns_ClaimLongPollWakes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb := pullBundle(t, b)
		waiting := make(chan struct{}, 1)
		ingest.SetPullWaiting(tb.srv, func() {
			select {
			case waiting <- struct{}{}:
			default:
			}
		})
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		type result struct {
			r   ingest.ClaimReply
			err error
		}
		done := make(chan result, 1)
		go func() {
			r, err := w.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Max: 5, Wait: "30s", Worker: "w"})
			done <- result{r, err}
		}()
		<-waiting
		_, _, err := wc.CreateJob(ctx, ingest.JobRequest{ID: "late", Queue: "q", Type: "t", Schedule: ingest.Schedule{Now: true}}, "")
		require.NoError(t, err)
		res := <-done
		require.NoError(t, res.err)
		require.Len(t, res.r.Runs, 1)
		require.Equal(t, "late", res.r.Runs[0].JobID)
	})
}

// A run a dispatcher fired ahead of its due time (its lead) is not handed out over HTTP:
// the claim answers empty, though the run is ready for the Go SDK, which holds it.
func TestRuns_ClaimNotBeforeDue(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb := pullBundle(t, b)
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		_, _, err := wc.CreateJob(ctx, ingest.JobRequest{ID: "ahead", Queue: "q", Type: "t", Schedule: ingest.Schedule{Delay: "1h"}}, "")
		require.NoError(t, err)
		fired := 0
		for _, l := range tb.leases() {
			d, err := tb.store.FireDue(ctx, l, 100, 2*time.Hour)
			require.NoError(t, err)
			fired += d.Fired
		}
		require.Equal(t, 1, fired)
		got, err := w.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Max: 10, Worker: "w"})
		require.NoError(t, err)
		require.Empty(t, got.Runs)
		id := tb.store.ShardOf("ahead")
		c, err := tb.store.Claim(ctx, id, "q", 10, "sdk", "n")
		require.NoError(t, err)
		require.Len(t, c, 1, "the run is ready for a worker that holds it")
	})
}

// A worker that stops heartbeating loses its run after the visibility deadline: it is
// redelivered, and the first worker's late ack is refused with 409. Heartbeats of the
// new holder extend it; the old token is lost.
func TestRuns_RedeliveredAfterDeadline(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb := pullBundle(t, b)
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		_, _, err := wc.CreateJob(ctx, ingest.JobRequest{ID: "slow", Queue: "q", Type: "t", Schedule: ingest.Schedule{Now: true},
			Visibility: "1s", Retry: &ingest.Retry{InitialBackoff: "1ms", MaxBackoff: "1ms"}}, "")
		require.NoError(t, err)
		first := claimOne(t, w, ingest.ClaimRequest{Queues: []string{"q"}, Worker: "w1"})
		leases := tb.leases()
		var second ingest.ClaimedRun
		require.Eventually(t, func() bool {
			for _, l := range leases { // the dispatcher's reaping and firing
				_, err := tb.store.Reap(ctx, l, 100)
				require.NoError(t, err)
				_, err = tb.store.FireDue(ctx, l, 100, 0)
				require.NoError(t, err)
			}
			r, err := w.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Worker: "w2"})
			require.NoError(t, err)
			if len(r.Runs) == 0 {
				return false
			}
			second = r.Runs[0]
			return true
		}, 20*time.Second, 20*time.Millisecond)
		require.Equal(t, first.Run, second.Run)
		require.Equal(t, 2, second.Attempt)
		require.NotEqual(t, first.Token, second.Token)

		_, err = w.AckRun(ctx, first.Run, first.Token, nil)
		requireAPIError(t, err, 409, ingest.CodeTokenMismatch)
		hb, err := w.HeartbeatRuns(ctx, "w", []ingest.HeldRun{{Run: first.Run, Token: first.Token}, {Run: second.Run, Token: second.Token}})
		require.NoError(t, err)
		require.Equal(t, []ingest.HeartbeatRun{{Run: first.Run, State: ingest.HeartbeatLost}, {Run: second.Run, State: ingest.HeartbeatExtended}}, hb.Runs)
		_, err = w.AckRun(ctx, second.Run, second.Token, nil)
		require.NoError(t, err)
		runs, err := wc.Runs(ctx, "slow")
		require.NoError(t, err)
		require.Equal(t, "succeeded", runs.Runs[0].Outcome)
		require.Equal(t, "lost", runs.Runs[1].Outcome)
	})
}

// A heartbeat says which runs were cancelled meanwhile; fail, snooze and cancel report
// the other ends.
func TestRuns_HeartbeatCancelledAndOtherEnds(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb := pullBundle(t, b)
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		for _, id := range []string{"c", "f", "s"} {
			_, _, err := wc.CreateJob(ctx, ingest.JobRequest{ID: id, Queue: "q", Type: "t", Schedule: ingest.Schedule{Now: true},
				Retry: &ingest.Retry{InitialBackoff: "1h", MaxAttempts: 3}}, "")
			require.NoError(t, err)
		}
		got, err := w.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Max: 3, Worker: "w"})
		require.NoError(t, err)
		require.Len(t, got.Runs, 3)
		byID := map[string]ingest.ClaimedRun{}
		var held []ingest.HeldRun
		for _, r := range got.Runs {
			byID[r.JobID] = r
			held = append(held, ingest.HeldRun{Run: r.Run, Token: r.Token})
		}
		_, err = wc.CancelJob(ctx, "c")
		require.NoError(t, err)
		hb, err := w.HeartbeatRuns(ctx, "w", held)
		require.NoError(t, err)
		for i, r := range hb.Runs {
			require.Equal(t, held[i].Run, r.Run)
			want := ingest.HeartbeatExtended
			if r.Run == byID["c"].Run {
				want = ingest.HeartbeatCancelled
			}
			require.Equal(t, want, r.State, r.Run)
		}
		_, err = w.CancelRun(ctx, byID["c"].Run, byID["c"].Token, "")
		require.NoError(t, err)
		_, err = w.FailRun(ctx, byID["f"].Run, byID["f"].Token, "smtp down", 10*time.Minute)
		require.NoError(t, err)
		_, err = w.SnoozeRun(ctx, byID["s"].Run, byID["s"].Token, time.Hour)
		require.NoError(t, err)

		now, err := tb.store.ServerNow(ctx)
		require.NoError(t, err)
		j, err := wc.GetJob(ctx, "f")
		require.NoError(t, err)
		require.Equal(t, "retrying", j.State)
		require.WithinRange(t, *j.RetryAt, now.Add(9*time.Minute), now.Add(11*time.Minute), "retry_after, not the hour of backoff")
		runs, err := wc.Runs(ctx, "f")
		require.NoError(t, err)
		require.Equal(t, "smtp down", runs.Runs[0].Error)
		runs, err = wc.Runs(ctx, "s")
		require.NoError(t, err)
		require.Equal(t, "snoozed", runs.Runs[0].Outcome)
		j, err = wc.GetJob(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, "cancelled", j.State)
	})
}

// A claim with types hands back runs of other types at once, without using an attempt.
func TestRuns_ClaimTypes(t *testing.T) {
	tb := setupMiniStore(t, shard.Config{Shards: 1}, ingest.Config{})
	ctx := context.Background()
	c := tb.client("")
	_, _, err := c.CreateJob(ctx, ingest.JobRequest{ID: "x", Queue: "q", Type: "other", Schedule: ingest.Schedule{Now: true}}, "")
	require.NoError(t, err)
	got, err := c.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Types: []string{"mine"}, Max: 5, Worker: "w"})
	require.NoError(t, err)
	require.Empty(t, got.Runs)
	r := claimOne(t, c, ingest.ClaimRequest{Queues: []string{"q"}, Types: []string{"mine", "other"}, Worker: "w"})
	require.Equal(t, "x", r.JobID)
	require.Equal(t, 1, r.Attempt, "the hand-back used no attempt")
}

// Worker tokens may call the run endpoints only; write tokens may call them too; read
// tokens may not.
func TestRuns_Scopes(t *testing.T) {
	tb := setupMini(t, ingest.Config{Tokens: []ingest.Token{
		{Secret: pullWriter, Scope: ingest.ScopeWrite}, {Secret: pullReader, Scope: ingest.ScopeRead},
		{Secret: pullWorker, Scope: ingest.ScopeWorker}}})
	claim := []byte(`{"queues":["q"],"worker":"w"}`)
	auth := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	for _, tok := range []string{pullWorker, pullWriter} {
		r := tb.do("POST", "/v1/runs:claim", claim, auth(tok)...)
		require.Equal(t, 200, r.status, "%s", r.body)
		require.JSONEq(t, `{"runs":[]}`, string(r.body))
		r = tb.do("POST", "/v1/runs:heartbeat", []byte(`{"runs":[{"run":"a:1","token":"t"}]}`), auth(tok)...)
		require.Equal(t, 200, r.status, "%s", r.body)
	}
	tb.do("POST", "/v1/runs:claim", claim, auth(pullReader)...).requireError(t, 403, ingest.CodeForbidden, "")
	tb.do("POST", "/v1/runs/a:1:ack", []byte(`{"token":"t"}`), auth(pullReader)...).requireError(t, 403, ingest.CodeForbidden, "")
	tb.do("POST", "/v1/jobs", []byte(`{"type":"t","schedule":{"now":true}}`), auth(pullWorker)...).requireError(t, 403, ingest.CodeForbidden, "")
	tb.do("GET", "/v1/jobs", nil, auth(pullWorker)...).requireError(t, 403, ingest.CodeForbidden, "")
	tb.do("POST", "/v1/runs:claim", claim).requireError(t, 401, ingest.CodeUnauthenticated, "")
	require.Equal(t, 200, tb.do("GET", "/healthz", nil, auth(pullWorker)...).status)
}

// Bodies and run ids the run endpoints refuse, each with a 400 naming the field (413 for
// a result over the limit, 404 for a run id that cannot exist).
func TestRuns_BadRequests(t *testing.T) {
	tb := setupMini(t, ingest.Config{MaxResult: 16})
	run := "job:1764000000000"
	for _, c := range []struct {
		path   string
		body   string
		status int
		field  string
	}{
		{"/v1/runs:claim", `{"worker":"w"}`, 400, "queues"},
		{"/v1/runs:claim", `{"queues":[],"worker":"w"}`, 400, "queues"},
		{"/v1/runs:claim", `{"queues":["q","q"],"worker":"w"}`, 400, "queues[1]"},
		{"/v1/runs:claim", `{"queues":["a/b"],"worker":"w"}`, 400, "queues[0]"},
		{"/v1/runs:claim", `{"queues":["q"]}`, 400, "worker"},
		{"/v1/runs:claim", `{"queues":["q"],"worker":"a|b"}`, 400, "worker"},
		{"/v1/runs:claim", `{"queues":["q"],"worker":"w","max":1001}`, 400, "max"},
		{"/v1/runs:claim", `{"queues":["q"],"worker":"w","max":-1}`, 400, "max"},
		{"/v1/runs:claim", `{"queues":["q"],"worker":"w","wait":"2m"}`, 400, "wait"},
		{"/v1/runs:claim", `{"queues":["q"],"worker":"w","wait":"soon"}`, 400, "wait"},
		{"/v1/runs:claim", `{"queues":["q"],"worker":"w","types":[""]}`, 400, "types[0]"},
		{"/v1/runs:claim", `{"queues":["q"],"worker":"w","qeues":1}`, 400, "qeues"},
		{"/v1/runs:heartbeat", `{"runs":[]}`, 400, "runs"},
		{"/v1/runs:heartbeat", `{"runs":[{"run":"nocolon","token":"t"}]}`, 400, "runs[0].run"},
		{"/v1/runs:heartbeat", `{"runs":[{"run":"` + run + `"}]}`, 400, "runs[0].token"},
		{"/v1/runs/" + run + ":ack", `{}`, 400, "token"},
		{"/v1/runs/" + run + ":ack", `{"token":"t","result":1,"result_base64":"AA=="}`, 400, "result"},
		{"/v1/runs/" + run + ":ack", `{"token":"t","result_base64":"!!"}`, 400, "result_base64"},
		{"/v1/runs/" + run + ":ack", `{"token":"t","result":"0123456789abcdefghij"}`, 413, "result"},
		{"/v1/runs/" + run + ":ack", `{"token":"t","result_base64":"MDEyMzQ1Njc4OWFiY2RlZmc="}`, 413, "result_base64"}, // 17 bytes
		{"/v1/runs/" + run + ":ack", `{"token":"t","result_base64":"MDEyMzQ1Njc4OWFiY2RlZmdoaWprbG1u"}`, 413, "result_base64"},
		{"/v1/runs/" + run + ":fail", `{"token":"t","retry_after":"-1s"}`, 400, "retry_after"},
		{"/v1/runs/" + run + ":snooze", `{"token":"t"}`, 400, "delay"},
		{"/v1/runs/" + run + ":snooze", `{"token":"t","delay":"x"}`, 400, "delay"},
		{"/v1/runs/" + run + ":cancel", `{"error":"x"}`, 400, "token"},
		{"/v1/runs/nocolon:ack", `{"token":"t"}`, 404, "run"},
		{"/v1/runs/job:notms:ack", `{"token":"t"}`, 404, "run"},
		{"/v1/runs/" + run + ":ack", `{"token":"t"}`, 404, ""}, // no such job
	} {
		t.Run(fmt.Sprintf("%s %s", c.path, c.body), func(t *testing.T) {
			r := tb.do("POST", c.path, []byte(c.body))
			code := ingest.CodeInvalid
			switch c.status {
			case 413:
				code = ingest.CodeTooLarge
			case 404:
				code = ingest.CodeNotFound
			}
			r.requireError(t, c.status, code, c.field)
		})
	}
}

// A workflow node claimed over HTTP names its workflow and node and carries its parents'
// results: JSON as JSON, other bytes in base64, a result too large for the run's share
// named in parents_omitted (the result endpoint reads it).
func TestRuns_ClaimCarriesParentResults(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb := pullBundle(t, b)
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		_, _, err := wc.CreateWorkflow(ctx, ingest.WorkflowRequest{ID: "wf", Jobs: []ingest.NodeRequest{
			{ID: "json", Queue: "q", Type: "t"}, {ID: "bin", Queue: "q", Type: "t"}, {ID: "big", Queue: "q", Type: "t"},
			{ID: "none", Queue: "q", Type: "t"},
			{ID: "join", Queue: "q", Type: "t", DependsOn: []string{"json", "bin", "big", "none"}},
		}}, "")
		require.NoError(t, err)
		roots, err := w.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Max: 10, Worker: "py-1"})
		require.NoError(t, err)
		require.Len(t, roots.Runs, 4)
		results := map[string][]byte{"json": []byte(`{"rows":3}`), "bin": {0, 1, 0xff}, "big": bytes.Repeat([]byte("x"), ingest.MaxParentResults)}
		for _, r := range roots.Runs {
			require.Equal(t, "wf", r.Workflow)
			require.Empty(t, r.Parents, "a root has no parents")
			_, err := w.AckRun(ctx, r.Run, r.Token, results[r.Node])
			require.NoError(t, err)
		}
		join := claimOne(t, w, ingest.ClaimRequest{Queues: []string{"q"}, Max: 10, Worker: "py-1"})
		require.Equal(t, "wf@join", join.JobID)
		require.Equal(t, "wf", join.Workflow)
		require.Equal(t, "join", join.Node)
		require.Len(t, join.Parents, 2)
		require.Equal(t, "bin", join.Parents[0].Node)
		require.Equal(t, "AAH/", join.Parents[0].ResultBase64)
		require.Equal(t, "json", join.Parents[1].Node)
		require.JSONEq(t, `{"rows":3}`, string(join.Parents[1].Result))
		require.Equal(t, []string{"big"}, join.ParentsOmitted, "over the share; none had no result")
		big, err := wc.NodeResult(ctx, "wf", "big")
		require.NoError(t, err)
		require.Len(t, big, ingest.MaxParentResults)
		// The worker reads it as the claim says, with its own (worker) token.
		big, err = w.NodeResult(ctx, "wf", "big")
		require.NoError(t, err, "a worker token reads an omitted parent's result")
		require.Len(t, big, ingest.MaxParentResults)
	})
}

// A parent's result that is JSON with spaces or a trailing newline (a push target's body
// written by json.Encoder, a Go handler's indented result) comes in a claim as JSON, as
// the result endpoint serves it and a push delivery's Tock-Parent-Results carries it,
// not as base64 bytes.
func TestRuns_ClaimParentResultJSONNotCompact(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb := pullBundle(t, b)
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		_, _, err := wc.CreateWorkflow(ctx, ingest.WorkflowRequest{ID: "wf", Jobs: []ingest.NodeRequest{
			{ID: "a", Queue: "q", Type: "t"}, {ID: "b", Queue: "q", Type: "t", DependsOn: []string{"a"}},
		}}, "")
		require.NoError(t, err)
		a := claimOne(t, w, ingest.ClaimRequest{Queues: []string{"q"}, Worker: "py-1"})
		_, err = w.AckRun(ctx, a.Run, a.Token, []byte("{\"rows\": [1, 2]}\n"))
		require.NoError(t, err)
		child := claimOne(t, w, ingest.ClaimRequest{Queues: []string{"q"}, Worker: "py-1"})
		require.Len(t, child.Parents, 1)
		require.Empty(t, child.Parents[0].ResultBase64)
		require.Equal(t, `{"rows":[1,2]}`, string(child.Parents[0].Result))
	})
}

// A join's claim carries at most MaxParentResults bytes of its parents' results, and
// reads no more than that from Redis: it read every parent's result whole and then kept
// what fit, so that a join of 16 parents with 1 MiB results (what a Go handler may
// return) read 16 MiB for a claim that carries 3 bytes (a claim of many such joins, or
// a fan-in of thousands, read that many times over, in one reply).
func TestRuns_ClaimReadsNoParentResultItDoesNotCarry(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		if b.Name != redistest.Server {
			t.Skip("counts the server's output bytes (INFO stats)")
		}
		ctx := context.Background()
		tb := pullBundle(t, b)
		w := tb.client(pullWorker)
		nodes := []job.Node{{Job: job.Job{ID: "small", Queue: "q", Type: "t"}}}
		join := job.Node{Job: job.Job{ID: "join", Queue: "q", Type: "t"}, DependsOn: []string{"small"}}
		for i := range 16 {
			id := fmt.Sprintf("big%02d", i)
			nodes = append(nodes, job.Node{Job: job.Job{ID: id, Queue: "q", Type: "t"}})
			join.DependsOn = append(join.DependsOn, id)
		}
		_, err := tb.store.CreateWorkflow(ctx, &job.Workflow{ID: "fan", Jobs: append(nodes, join)})
		require.NoError(t, err)
		id := tb.store.ShardOf("fan")
		roots, err := tb.store.Claim(ctx, id, "q", 100, "w", "n")
		require.NoError(t, err)
		require.Len(t, roots, 17)
		var fs []shard.Finish
		for _, r := range roots {
			res := bytes.Repeat([]byte("x"), shard.MaxResult)
			if r.JobID == "fan@small" {
				res = []byte(`"s"`)
			}
			fs = append(fs, shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded, Result: res})
		}
		errs, err := tb.store.FinishRuns(ctx, id, fs)
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
		sent := func() int64 {
			info, err := tb.rc.Do(ctx, tb.rc.B().Info().Section("stats").Build()).ToString()
			require.NoError(t, err)
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_net_output_bytes:"); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					require.NoError(t, err)
					return n
				}
			}
			t.Fatal("no total_net_output_bytes")
			return 0
		}
		before := sent()
		run := claimOne(t, w, ingest.ClaimRequest{Queues: []string{"q"}, Max: 10, Worker: "py-1"})
		read := sent() - before
		require.Equal(t, "fan@join", run.JobID)
		require.Len(t, run.Parents, 1)
		require.Equal(t, "small", run.Parents[0].Node)
		require.Len(t, run.ParentsOmitted, 16)
		require.Less(t, read, int64(256<<10), "bytes Redis sent for the claim")
	})
}
