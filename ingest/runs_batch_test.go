package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/lua"
	"github.com/tockhq/tock/shard"
)

// finishCounter is a rueidis client that counts the finish_runs calls sent through it,
// and the shards they were for.
type finishCounter struct {
	rueidis.Client
	fn, sha string
	mu      sync.Mutex
	calls   int
	keys    map[string]int // KEYS[1] (the shard's in-flight set) → calls
}

func newFinishCounter(t *testing.T, c rueidis.Client) *finishCounter {
	t.Helper()
	s, err := lua.Load()
	require.NoError(t, err)
	return &finishCounter{Client: c, fn: s.FinishRuns.Fn, sha: s.FinishRuns.SHA, keys: map[string]int{}}
}

func (f *finishCounter) note(cmds ...rueidis.Completed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cmds {
		a := c.Commands()
		if len(a) >= 4 && (strings.HasPrefix(a[0], "FCALL") && a[1] == f.fn || a[0] == "EVALSHA" && a[1] == f.sha) {
			f.calls++
			f.keys[a[3]]++
		}
	}
}

func (f *finishCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	f.note(cmd)
	return f.Client.Do(ctx, cmd)
}

func (f *finishCounter) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	f.note(cmds...)
	return f.Client.DoMulti(ctx, cmds...)
}

func (f *finishCounter) count() (calls int, shards int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, len(f.keys)
}

func (f *finishCounter) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.keys = 0, map[string]int{}
}

// pullBundleCounting is pullBundle with its store's client counting finish_runs calls.
func pullBundleCounting(t *testing.T, b redistest.Backend) (*bundle, *finishCounter) {
	t.Helper()
	fc := newFinishCounter(t, b.Client(t))
	st, ns := openStore(t, b, fc, shard.Config{Shards: 4, ColdAfter: -1})
	return serve(t, b, fc, ns, ingest.Config{Store: st, Tokens: []ingest.Token{
		{Secret: pullWriter, Scope: ingest.ScopeWrite}, {Secret: pullReader, Scope: ingest.ScopeRead},
		{Secret: pullWorker, Scope: ingest.ScopeWorker}}}), fc
}

// createNow creates n jobs ready now in queue q, named prefix0…
func createNow(t *testing.T, wc *ingest.Client, q, prefix string, n int, retry *ingest.Retry) {
	t.Helper()
	items := make([]ingest.JobRequest, n)
	for i := range items {
		items[i] = ingest.JobRequest{ID: prefix + strconv.Itoa(i), Queue: q, Type: "t", Schedule: ingest.Schedule{Now: true}, Retry: retry}
	}
	r, err := wc.CreateBatch(context.Background(), items)
	require.NoError(t, err)
	require.Equal(t, n, r.Created, "%+v", r)
}

// A batch ack records many runs with one finish_runs call per shard, results included,
// and answers per run: refused runs (a wrong token, a run acked twice, a run that cannot
// exist, a job that does not exist, bad fields) do not stop the others.
func TestRuns_AckBatch(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb, fc := pullBundleCounting(t, b)
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		createNow(t, wc, "q", "j", 40, nil)
		got, err := w.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Max: 100, Worker: "py-1"})
		require.NoError(t, err)
		require.Len(t, got.Runs, 40)
		shards := map[shard.ID]bool{}
		var acks []ingest.RunAck
		for _, r := range got.Runs {
			shards[tb.store.ShardOf(r.JobID)] = true
			a := ingest.RunAck{Run: r.Run, Token: r.Token}
			switch r.JobID {
			case "j0":
				a.Result = json.RawMessage(`{"sent": true}`)
			case "j1":
				a.ResultBase64 = "AAEC/w=="
			}
			acks = append(acks, a)
		}
		require.Greater(t, len(shards), 1, "the runs span shards")
		fc.reset()
		reply, err := w.AckRuns(ctx, acks)
		require.NoError(t, err)
		require.Equal(t, 40, reply.Done)
		require.Zero(t, reply.Refused)
		for i, r := range reply.Runs {
			require.Equal(t, ingest.RunResult{Run: acks[i].Run, Status: 200, Outcome: "ok"}, r)
		}
		calls, callShards := fc.count()
		require.Equal(t, len(shards), calls, "one finish_runs call per shard")
		require.Equal(t, len(shards), callShards)

		runs, err := wc.Runs(ctx, "j0")
		require.NoError(t, err)
		require.Equal(t, "succeeded", runs.Runs[0].Outcome)
		require.Equal(t, "py-1", runs.Runs[0].Worker)
		require.JSONEq(t, `{"sent":true}`, string(runs.Runs[0].Result))
		runs, err = wc.Runs(ctx, "j1")
		require.NoError(t, err)
		require.Equal(t, "AAEC/w==", runs.Runs[0].ResultBase64)
		j, err := wc.GetJob(ctx, "j7")
		require.NoError(t, err)
		require.Equal(t, "completed", j.State)

		// Refusals, per run, among good acks.
		createNow(t, wc, "q", "k", 3, nil)
		got, err = w.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Max: 10, Worker: "py-1"})
		require.NoError(t, err)
		require.Len(t, got.Runs, 3)
		k0, k1, k2 := got.Runs[0], got.Runs[1], got.Runs[2]
		batch := []ingest.RunAck{
			{Run: k0.Run, Token: k0.Token},
			{Run: acks[5].Run, Token: acks[5].Token},       // acked already
			{Run: k1.Run, Token: k1.Token + "x"},           // not its token
			{Run: "nosuch:1764000000000", Token: k0.Token}, // no such job
			{Run: "nocolon", Token: k0.Token},              // cannot exist
			{Run: k2.Run},                                  // no token
			{Run: k2.Run, Token: k2.Token, Result: json.RawMessage(`1`), ResultBase64: "AA=="}, // both results
			{Run: k0.Run, Token: k0.Token}, // twice in the batch: the second is late
			{Run: k1.Run, Token: k1.Token},
		}
		reply, err = w.AckRuns(ctx, batch)
		require.NoError(t, err)
		require.Equal(t, 2, reply.Done)
		require.Equal(t, 7, reply.Refused)
		want := []struct {
			status int
			code   string
			field  string
		}{
			{200, "", ""},
			{409, ingest.CodeTokenMismatch, "runs[1].token"},
			{409, ingest.CodeTokenMismatch, "runs[2].token"},
			{404, ingest.CodeNotFound, ""},
			{404, ingest.CodeNotFound, "runs[4].run"},
			{400, ingest.CodeInvalid, "runs[5].token"},
			{400, ingest.CodeInvalid, "runs[6].result"},
			{409, ingest.CodeTokenMismatch, "runs[7].token"},
			{200, "", ""},
		}
		require.Len(t, reply.Runs, len(want))
		for i, wt := range want {
			r := reply.Runs[i]
			require.Equal(t, batch[i].Run, r.Run, i)
			require.Equal(t, wt.status, r.Status, "%d: %+v", i, r.Error)
			if wt.status == 200 {
				require.Equal(t, "ok", r.Outcome)
				require.Nil(t, r.Error)
				continue
			}
			require.Empty(t, r.Outcome)
			require.NotNil(t, r.Error, i)
			require.Equal(t, wt.code, r.Error.Code, i)
			require.Equal(t, wt.field, r.Error.Field, i)
			require.NotEmpty(t, r.Error.Message, i)
		}
		// k2, refused for its fields, is still held: its own ack goes.
		_, err = w.AckRun(ctx, k2.Run, k2.Token, nil)
		require.NoError(t, err)
	})
}

// A worker's late batch ack after its run was redelivered is refused for that run with
// 409, never recorded; the new holder's batch ack goes.
func TestRuns_AckBatchLateAfterRedelivery(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb := pullBundle(t, b)
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		_, _, err := wc.CreateJob(ctx, ingest.JobRequest{ID: "slow", Queue: "q", Type: "t", Schedule: ingest.Schedule{Now: true},
			Visibility: "1s", Retry: &ingest.Retry{InitialBackoff: "1ms", MaxBackoff: "1ms"}}, "")
		require.NoError(t, err)
		_, _, err = wc.CreateJob(ctx, ingest.JobRequest{ID: "other", Queue: "q2", Type: "t", Schedule: ingest.Schedule{Now: true}}, "")
		require.NoError(t, err)
		first := claimOne(t, w, ingest.ClaimRequest{Queues: []string{"q"}, Worker: "w1"})
		leases := tb.leases()
		var second ingest.ClaimedRun
		require.Eventually(t, func() bool {
			for _, l := range leases {
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
		other := claimOne(t, w, ingest.ClaimRequest{Queues: []string{"q2"}, Worker: "w1"})

		reply, err := w.AckRuns(ctx, []ingest.RunAck{{Run: first.Run, Token: first.Token}, {Run: other.Run, Token: other.Token}})
		require.NoError(t, err)
		require.Equal(t, 409, reply.Runs[0].Status)
		require.Equal(t, ingest.CodeTokenMismatch, reply.Runs[0].Error.Code)
		require.Equal(t, 200, reply.Runs[1].Status, "the other run of the late worker's batch is recorded")
		j, err := wc.GetJob(ctx, "slow")
		require.NoError(t, err)
		require.NotEqual(t, "succeeded", j.State, "the late ack was not recorded")

		reply, err = w.AckRuns(ctx, []ingest.RunAck{{Run: second.Run, Token: second.Token}})
		require.NoError(t, err)
		require.Equal(t, 1, reply.Done)
		runs, err := wc.Runs(ctx, "slow")
		require.NoError(t, err)
		require.Equal(t, "succeeded", runs.Runs[0].Outcome)
		require.Equal(t, "lost", runs.Runs[1].Outcome)
	})
}

// A batch fail fails each run by the job's policy (retry_after instead of the backoff
// when given); a bad retry_after refuses its run only.
func TestRuns_FailBatch(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		tb, fc := pullBundleCounting(t, b)
		wc, w := tb.client(pullWriter), tb.client(pullWorker)
		createNow(t, wc, "q", "f", 12, &ingest.Retry{InitialBackoff: "1h", MaxAttempts: 3})
		got, err := w.ClaimRuns(ctx, ingest.ClaimRequest{Queues: []string{"q"}, Max: 20, Worker: "w"})
		require.NoError(t, err)
		require.Len(t, got.Runs, 12)
		byID := map[string]ingest.ClaimedRun{}
		var fails []ingest.RunFail
		shards := map[shard.ID]bool{}
		for _, r := range got.Runs {
			byID[r.JobID] = r
			shards[tb.store.ShardOf(r.JobID)] = true
			fails = append(fails, ingest.RunFail{Run: r.Run, Token: r.Token, Error: "smtp down " + r.JobID, RetryAfter: "10m"})
		}
		k := 3
		if fails[k].Run == byID["f0"].Run {
			k = 4
		}
		bad := fails[k]
		fails[k].RetryAfter = "soon"
		fc.reset()
		reply, err := w.FailRuns(ctx, fails)
		require.NoError(t, err)
		require.Equal(t, 11, reply.Done)
		require.Equal(t, 1, reply.Refused)
		require.Equal(t, 400, reply.Runs[k].Status)
		require.Equal(t, "runs["+strconv.Itoa(k)+"].retry_after", reply.Runs[k].Error.Field)
		require.Equal(t, "error", reply.Runs[0].Outcome)
		calls, _ := fc.count()
		require.LessOrEqual(t, calls, len(shards), "one finish_runs call per shard")

		now, err := tb.store.ServerNow(ctx)
		require.NoError(t, err)
		j, err := wc.GetJob(ctx, "f0")
		require.NoError(t, err)
		require.Equal(t, "retrying", j.State)
		require.WithinRange(t, *j.RetryAt, now.Add(9*time.Minute), now.Add(11*time.Minute), "retry_after, not the hour of backoff")
		runs, err := wc.Runs(ctx, "f0")
		require.NoError(t, err)
		require.Equal(t, "smtp down f0", runs.Runs[0].Error)

		// The refused run is still held: without retry_after, the job's backoff.
		reply, err = w.FailRuns(ctx, []ingest.RunFail{{Run: bad.Run, Token: bad.Token}})
		require.NoError(t, err)
		require.Equal(t, 1, reply.Done)
		jobID, _, _ := shard.SplitMember(bad.Run)
		runs, err = wc.Runs(ctx, jobID)
		require.NoError(t, err)
		require.Equal(t, "failed by the worker", runs.Runs[0].Error)
	})
}

// The batch endpoints take worker and write tokens, not read tokens; their bodies are
// bounded and checked as a whole before any run is reported.
func TestRuns_BatchScopesAndLimits(t *testing.T) {
	tb := setupMini(t, ingest.Config{Tokens: []ingest.Token{
		{Secret: pullWriter, Scope: ingest.ScopeWrite}, {Secret: pullReader, Scope: ingest.ScopeRead},
		{Secret: pullWorker, Scope: ingest.ScopeWorker}}})
	auth := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	one := []byte(`{"runs":[{"run":"a:1","token":"t"}]}`)
	for _, path := range []string{"/v1/runs:ack", "/v1/runs:fail"} {
		for _, tok := range []string{pullWorker, pullWriter} {
			r := tb.do("POST", path, one, auth(tok)...)
			require.Equal(t, 200, r.status, "%s", r.body)
			var rr ingest.RunsReply
			require.NoError(t, json.Unmarshal(r.body, &rr))
			require.Equal(t, 1, rr.Refused)
			require.Equal(t, 404, rr.Runs[0].Status, "no such job")
		}
		tb.do("POST", path, one, auth(pullReader)...).requireError(t, 403, ingest.CodeForbidden, "")
		tb.do("POST", path, one).requireError(t, 401, ingest.CodeUnauthenticated, "")
		tb.do("GET", path, nil, auth(pullWorker)...).requireError(t, 405, ingest.CodeMethod, "")

		var many strings.Builder
		many.WriteString(`{"runs":[`)
		for i := range ingest.MaxReportRuns + 1 {
			if i > 0 {
				many.WriteByte(',')
			}
			fmt.Fprintf(&many, `{"run":"j%d:1","token":"t"}`, i)
		}
		many.WriteString(`]}`)
		e := tb.do("POST", path, []byte(many.String()), auth(pullWorker)...).requireError(t, 400, ingest.CodeInvalid, "runs")
		require.Contains(t, e.Message, "at most 1000")
		tb.do("POST", path, []byte(`{"runs":[]}`), auth(pullWorker)...).requireError(t, 400, ingest.CodeInvalid, "runs")
		tb.do("POST", path, []byte(`{}`), auth(pullWorker)...).requireError(t, 400, ingest.CodeInvalid, "runs")
		tb.do("POST", path, []byte(`{"runs":[{"run":"a:1","token":"t","tokn":1}]}`), auth(pullWorker)...).requireError(t, 400, ingest.CodeInvalid, "runs[0].tokn")
		tb.do("POST", path, []byte(`{"runs":{}}`), auth(pullWorker)...).requireError(t, 400, ingest.CodeInvalid, "runs")
		tb.do("POST", path, []byte(`{"runs":[`), auth(pullWorker)...).requireError(t, 400, ingest.CodeInvalid, "")
	}
	// A result over the limit refuses its run with 413.
	small := setupMini(t, ingest.Config{MaxResult: 4})
	r := small.do("POST", "/v1/runs:ack", []byte(`{"runs":[{"run":"a:1","token":"t","result":"0123456789"}]}`))
	require.Equal(t, 200, r.status, "%s", r.body)
	var rr ingest.RunsReply
	require.NoError(t, json.Unmarshal(r.body, &rr))
	require.Equal(t, 413, rr.Runs[0].Status)
	require.Equal(t, ingest.CodeTooLarge, rr.Runs[0].Error.Code)
	require.Equal(t, "runs[0].result", rr.Runs[0].Error.Field)
}

// FuzzAckRuns sends arbitrary bodies to the batch ack: the reply is a 200 with one
// result per run or a 400, never a server error.
func FuzzAckRuns(f *testing.F) {
	for _, s := range []string{
		`{"runs":[{"run":"a:1","token":"t"}]}`,
		`{"runs":[{"run":"a:1","token":"t","result":{"x":1}},{"run":"b:2","token":"u","result_base64":"AA=="}]}`,
		`{"runs":[{"run":"nocolon","token":""}]}`,
		`{"runs":[]}`,
		`{"runs":null}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tb := setupMini(t, ingest.Config{})
		r := tb.do("POST", "/v1/runs:ack", body)
		switch r.status {
		case 200:
			var rr ingest.RunsReply
			require.NoError(t, json.Unmarshal(r.body, &rr), "%s", r.body)
			require.Equal(t, len(rr.Runs), rr.Done+rr.Refused)
		case 400, 413:
		default:
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	})
}
