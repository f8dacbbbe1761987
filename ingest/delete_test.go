package ingest_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
)

// POST /v1/jobs/{id}:delete removes a job now (GET then answers 404), where DELETE
// /v1/jobs/{id} still cancels and keeps it; a missing job is a 404, a read token a 403.
// The bulk action "delete" does the same by ids and by filter, page after page.
func TestServer_DeleteJob(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{Tokens: []ingest.Token{
			{Secret: "reader-secret", Scope: ingest.ScopeRead}, {Secret: "writer-secret", Scope: ingest.ScopeWrite}}})
		ctx := t.Context()
		w, r := tb.client("writer-secret"), tb.client("reader-secret")
		mk := func(id, queue string, s job.Schedule) *job.Job {
			return &job.Job{ID: id, Queue: queue, Type: "t", Schedule: s}
		}
		jobs := []*job.Job{mk("one", "", job.Schedule{Delay: time.Hour}), mk("cron", "", job.Schedule{Cron: "0 0 * * *"}),
			mk("kept", "", job.Schedule{Delay: time.Hour}), mk("ids-1", "", job.Schedule{Now: true}), mk("ids-2", "", job.Schedule{Delay: time.Hour})}
		for i := range 7 {
			jobs = append(jobs, mk("f-"+strconv.Itoa(i), "purge", job.Schedule{Delay: time.Hour}))
		}
		jobs = append(jobs, mk("g-other", "purge", job.Schedule{Delay: time.Hour}))
		_, err := tb.store.Create(ctx, jobs)
		require.NoError(t, err)

		// A read token may not delete.
		tb.do("POST", "/v1/jobs/one:delete", nil, "Authorization", "Bearer reader-secret").requireError(t, 403, ingest.CodeForbidden, "")
		_, err = r.DeleteJob(ctx, "one")
		require.True(t, ingest.IsCode(err, ingest.CodeForbidden), "%v", err)
		_, err = r.BulkJobs(ctx, ingest.BulkRequest{Action: "delete", IDs: []string{"one"}})
		require.True(t, ingest.IsCode(err, ingest.CodeForbidden), "%v", err)
		_, err = tb.store.Get(ctx, "one")
		require.NoError(t, err)

		var sr ingest.StateReply
		tb.doJSON("POST", "/v1/jobs/one:delete", nil, &sr, "Authorization", "Bearer writer-secret").requireStatus(t, 200)
		require.Equal(t, ingest.StateReply{ID: "one", State: "deleted", Changed: true}, sr)
		tb.do("GET", "/v1/jobs/one", nil, "Authorization", "Bearer reader-secret").requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("POST", "/v1/jobs/one:delete", nil, "Authorization", "Bearer writer-secret").requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("GET", "/v1/jobs/x:delete", nil, "Authorization", "Bearer writer-secret").requireStatus(t, 405)

		sr, err = w.DeleteJob(ctx, "cron")
		require.NoError(t, err)
		require.Equal(t, ingest.StateReply{ID: "cron", State: "deleted", Changed: true}, sr)
		_, err = w.GetJob(ctx, "cron")
		require.True(t, ingest.IsCode(err, ingest.CodeNotFound), "%v", err)
		_, err = w.DeleteJob(ctx, "cron")
		require.True(t, ingest.IsCode(err, ingest.CodeNotFound), "%v", err)

		// DELETE still cancels: the job stays readable.
		sr, err = w.CancelJob(ctx, "kept")
		require.NoError(t, err)
		require.Equal(t, "cancelled", sr.State)
		j, err := w.GetJob(ctx, "kept")
		require.NoError(t, err)
		require.Equal(t, "cancelled", j.State)

		// Bulk, by ids: a missing one fails alone.
		br, err := w.BulkJobs(ctx, ingest.BulkRequest{Action: "delete", IDs: []string{"ids-1", "ids-2", "nope"}})
		require.NoError(t, err)
		require.Equal(t, 3, br.Matched)
		require.Equal(t, 2, br.Changed)
		require.Equal(t, 1, br.Failed)
		require.Equal(t, "nope", br.Errors[0].ID)
		require.Equal(t, ingest.CodeNotFound, br.Errors[0].Error.Code)
		for _, id := range []string{"ids-1", "ids-2"} {
			_, err = w.GetJob(ctx, id)
			require.True(t, ingest.IsCode(err, ingest.CodeNotFound), "%s: %v", id, err)
		}

		// Bulk, by filter, following the cursors: only what matches goes.
		sum, err := w.BulkAll(ctx, w.BulkJobs, ingest.BulkRequest{Action: "delete",
			Filter: &ingest.JobFilter{Queue: "purge", Prefix: "f-"}}, nil)
		require.NoError(t, err)
		require.Equal(t, 7, sum.Changed)
		require.Zero(t, sum.Failed)
		l, err := w.SearchJobs(ctx, ingest.JobFilter{Queue: "purge"}, 100, "")
		for err == nil && l.NextCursor != "" {
			var more ingest.JobList
			more, err = w.SearchJobs(ctx, ingest.JobFilter{Queue: "purge"}, 100, l.NextCursor)
			l.Jobs, l.NextCursor = append(l.Jobs, more.Jobs...), more.NextCursor
		}
		require.NoError(t, err)
		require.Len(t, l.Jobs, 1)
		require.Equal(t, "g-other", l.Jobs[0].ID)

		_, err = w.BulkJobs(ctx, ingest.BulkRequest{Action: "obliterate", IDs: []string{"kept"}})
		require.True(t, ingest.IsCode(err, ingest.CodeInvalid), "%v", err)
		require.ErrorContains(t, err, "trigger or delete")
	})
}
