package ingest_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func TestPreviewSchedule(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	c := tb.client("")
	ctx := t.Context()
	after := time.Date(2027, 3, 12, 12, 0, 0, 0, time.UTC)
	p, err := c.PreviewSchedule(ctx, "30 2 * * *", "America/New_York", 3, after)
	require.NoError(t, err)
	require.Equal(t, "America/New_York", p.Timezone)
	require.Len(t, p.Fires, 3)
	require.Empty(t, p.Fires[0].DST)
	require.Equal(t, job.DSTMoved, p.Fires[1].DST)
	require.Contains(t, p.Fires[1].Note, "02:30 does not exist on 2027-03-14")
	require.Equal(t, "2027-03-14T03:00:00-04:00", p.Fires[1].At.Format(time.RFC3339))

	p, err = c.PreviewSchedule(ctx, "@hourly", "", 0, time.Time{})
	require.NoError(t, err)
	require.Len(t, p.Fires, ingest.DefaultPreview)

	for _, tt := range []struct{ query, field, msg string }{
		{"", "cron", "required"},
		{"cron=61+*+*+*+*", "cron", "out of range"},
		{"cron=*+*+*+*+*&timezone=Mars/Base", "timezone", "Mars/Base"},
		{"cron=*+*+*+*+*&count=0", "count", "1 to 100"},
		{"cron=*+*+*+*+*&count=101", "count", "1 to 100"},
		{"cron=*+*+*+*+*&after=yesterday", "after", "RFC 3339"},
	} {
		e := tb.do("GET", "/v1/schedules:preview?"+tt.query, nil).requireError(t, 400, ingest.CodeInvalid, tt.field)
		require.Contains(t, e.Message, tt.msg, tt.query)
	}
}

func TestClusterAndFigures(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		ctx := t.Context()
		c := tb.client("")
		_, err := tb.store.Heartbeat(ctx, "disp-x", 10*time.Second, false)
		require.NoError(t, err)
		tb.store.AcquireLeases(ctx, "disp-x", []shard.ID{0, 1, 2}, 10*time.Second)
		_, err = tb.store.Create(ctx, []*job.Job{{ID: "r1", Queue: "q1", Type: "t", Schedule: job.Schedule{Now: true}}})
		require.NoError(t, err)
		require.NoError(t, tb.store.WorkerSeen(ctx, "w-9", time.Now()))

		v, err := c.Cluster(ctx)
		require.NoError(t, err)
		require.Len(t, v.Dispatchers, 1)
		require.Equal(t, []int{0, 1, 2}, v.Dispatchers[0].Shards)
		require.Len(t, v.Shards, tb.store.Shards())
		require.Equal(t, "w-9", v.Workers[0].ID)
		require.NotEmpty(t, v.Nodes)

		now := time.Now()
		require.NoError(t, tb.store.SampleFired(ctx, now.Add(-time.Minute)))
		var d shard.FigureDelta
		d.Add(7 * time.Millisecond)
		require.NoError(t, tb.store.AddFigures(ctx, map[shard.FigureKey]*shard.FigureDelta{{Queue: "q1", Minute: shard.Minute(now)}: &d}))
		f, err := c.Figures(ctx, "q1", 5)
		require.NoError(t, err)
		require.Len(t, f.BucketsMs, shard.NumLatenessBuckets-1)
		require.Len(t, f.Queues, 1)
		q := f.Queues[0]
		require.Len(t, q.Minutes, 5)
		require.Equal(t, int64(1), q.Last5m.Ended)
		require.Equal(t, 10.0, *q.Last5m.LatenessP99Ms)
		require.NotNil(t, q.Minutes[3].Fired, "the minute sampled, against the live total")
		require.Nil(t, q.Minutes[0].Fired)
		require.NotNil(t, q.Last5m.FiresPerSecond)

		tb.do("GET", "/v1/figures?minutes=4", nil).requireError(t, 400, ingest.CodeInvalid, "minutes")
		tb.do("GET", "/v1/figures?queue=a%20b", nil).requireError(t, 400, ingest.CodeInvalid, "queue")
	})
}

func TestSearchAndBulkJobs(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		ctx := t.Context()
		c := tb.client("")
		var jobs []*job.Job
		for i := range 30 {
			typ := "mail"
			if i%3 == 0 {
				typ = "sms"
			}
			jobs = append(jobs, &job.Job{ID: "bulk-" + strconv.Itoa(i), Queue: "bq", Type: typ, Schedule: job.Schedule{Delay: time.Hour}})
		}
		jobs = append(jobs, &job.Job{ID: "other-1", Queue: "bq", Type: "sms", Schedule: job.Schedule{Delay: time.Hour}})
		_, err := tb.store.Create(ctx, jobs)
		require.NoError(t, err)

		// A search by type and id prefix, page by page, with progress.
		var found []string
		cursor := ""
		for {
			l, err := c.SearchJobs(ctx, ingest.JobFilter{Type: "sms", Prefix: "bulk-"}, 5, cursor)
			require.NoError(t, err)
			require.NotNil(t, l.Progress)
			for _, j := range l.Jobs {
				found = append(found, j.ID)
			}
			if cursor = l.NextCursor; cursor == "" {
				require.Equal(t, l.Progress.Total, l.Progress.Done)
				break
			}
			require.Less(t, l.Progress.Done, l.Progress.Total)
		}
		require.ElementsMatch(t, []string{"bulk-0", "bulk-3", "bulk-6", "bulk-9", "bulk-12", "bulk-15", "bulk-18", "bulk-21", "bulk-24", "bulk-27"}, found)

		// By ids: one unknown id fails alone.
		r, err := c.BulkJobs(ctx, ingest.BulkRequest{Action: "pause", IDs: []string{"bulk-1", "bulk-2", "nope"}})
		require.NoError(t, err)
		require.Equal(t, 3, r.Matched)
		require.Equal(t, 2, r.Changed)
		require.Equal(t, 1, r.Failed)
		require.Equal(t, "nope", r.Errors[0].ID)
		require.Equal(t, ingest.CodeNotFound, r.Errors[0].Error.Code)

		// By filter, to the end: every sms job of the prefix is cancelled, others kept.
		pages := 0
		sum, err := c.BulkAll(ctx, c.BulkJobs, ingest.BulkRequest{Action: "cancel",
			Filter: &ingest.JobFilter{Queue: "bq", Type: "sms", Prefix: "bulk-"}}, func(ingest.BulkReply) { pages++ })
		require.NoError(t, err)
		require.Equal(t, 10, sum.Changed)
		require.Zero(t, sum.Failed)
		require.Positive(t, pages)
		info, err := tb.store.Get(ctx, "bulk-3")
		require.NoError(t, err)
		require.Equal(t, job.StateCancelled, info.State)
		info, err = tb.store.Get(ctx, "other-1")
		require.NoError(t, err)
		require.NotEqual(t, job.StateCancelled, info.State)

		for _, tt := range []struct{ body, field string }{
			{`{"action":"explode","ids":["a"]}`, "action"},
			{`{"action":"cancel"}`, ""},
			{`{"action":"cancel","ids":["a"],"filter":{}}`, ""},
			{`{"action":"cancel","ids":["a/b"]}`, "ids"},
			{`{"action":"cancel","ids":["a"],"cursor":"x"}`, "cursor"},
			{`{"action":"cancel","filter":{"state":"sleepy"}}`, "state"},
			{`{"action":"cancel","filter":{},"cursor":"garbage"}`, "cursor"},
			{`{"action":"requeue","ids":["x:1"],"extra":1}`, "extra"},
		} {
			tb.do("POST", "/v1/jobs:bulk", []byte(tt.body)).requireError(t, 400, ingest.CodeInvalid, tt.field)
		}
	})
}

func TestBulkDead(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{Tokens: []ingest.Token{{Secret: "r", Scope: ingest.ScopeRead}, {Secret: "w", Scope: ingest.ScopeWrite}}})
	ctx := t.Context()
	once := job.RetryPolicy{MaxAttempts: 1}
	var jobs []*job.Job
	for i := range 5 {
		jobs = append(jobs, &job.Job{ID: "d" + strconv.Itoa(i), Queue: "dq", Type: "t", Schedule: job.Schedule{Now: true}, Retry: once})
	}
	_, err := tb.store.Create(ctx, jobs)
	require.NoError(t, err)
	for id := range tb.store.Shards() {
		cl, err := tb.store.Claim(ctx, shard.ID(id), "dq", 100, "w", "n")
		require.NoError(t, err)
		for _, c := range cl {
			_, err := tb.store.FinishRuns(ctx, c.Shard, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: shard.Failed, Error: "boom"}})
			require.NoError(t, err)
		}
	}
	w := tb.client("w")
	dead, err := w.ListDead(ctx, "dq", 0, "")
	require.NoError(t, err)
	require.Len(t, dead.Dead, 5)

	// A read token may not.
	_, err = tb.client("r").BulkDead(ctx, ingest.BulkRequest{Action: "delete", IDs: []string{dead.Dead[0].Run}})
	require.True(t, ingest.IsCode(err, ingest.CodeForbidden), "%v", err)

	r, err := w.BulkDead(ctx, ingest.BulkRequest{Action: "requeue", IDs: []string{dead.Dead[0].Run}})
	require.NoError(t, err)
	require.Equal(t, 1, r.Changed)
	sum, err := w.BulkAll(ctx, w.BulkDead, ingest.BulkRequest{Action: "delete", Filter: &ingest.JobFilter{Queue: "dq"}}, nil)
	require.NoError(t, err)
	require.Equal(t, 4, sum.Changed)
	dead, err = w.ListDead(ctx, "dq", 0, "")
	require.NoError(t, err)
	require.Empty(t, dead.Dead)

	tb.do("POST", "/v1/dead:bulk", []byte(`{"action":"delete","filter":{"type":"t"}}`), "Authorization", "Bearer w").requireError(t, 400, ingest.CodeInvalid, "filter")
	tb.do("POST", "/v1/dead:bulk", []byte(`{"action":"cancel","ids":["x:1"]}`), "Authorization", "Bearer w").requireError(t, 400, ingest.CodeInvalid, "action")
	tb.do("POST", "/v1/dead:bulk", []byte(`{"action":"delete","ids":["x"]}`), "Authorization", "Bearer w").requireError(t, 400, ingest.CodeInvalid, "ids")
}
