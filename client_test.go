package tock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Retrying a create with the same *job.Job returns the existing job, and Create leaves
// the caller's job as it was: normalising is not idempotent (a jitter of -1, "none",
// becomes 0, which a second normalise reads as "default 0.2").
func TestClient_CreateTwiceWithTheSamePointer(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		j := &job.Job{ID: "retry-me", Type: "t", Payload: []byte("p"),
			Schedule: job.Schedule{Delay: time.Hour},
			Retry:    job.RetryPolicy{MaxAttempts: 3, Jitter: -1}}
		before := *j
		first, err := tb.client.Create(ctx, j)
		require.NoError(t, err)
		require.True(t, first.Created)
		require.Equal(t, before, *j, "Create must not change the caller's job")
		again, err := tb.client.Create(ctx, j)
		require.NoError(t, err)
		require.False(t, again.Created)
		require.False(t, again.Conflict, "the same job again is the existing job, not a conflict")
		require.Equal(t, first.NextRunAt, again.NextRunAt)

		// CreateMany too; a job without an id stays without one (the result names it).
		anon := &job.Job{Type: "t", Schedule: job.Schedule{Now: true}}
		res, err := tb.client.CreateMany(ctx, []*job.Job{j, anon})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.False(t, res[0].Conflict)
		require.NoError(t, res[1].Err)
		require.NotEmpty(t, res[1].ID)
		require.Empty(t, anon.ID)
		require.Nil(t, anon.Priority)
		require.Equal(t, before, *j)
	})
}

// Delete removes the job at once, where Cancel keeps it for the retention period.
func TestClient_DeleteRemovesTheJob(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		for _, id := range []string{"gone", "kept"} {
			_, err := tb.client.Create(ctx, &job.Job{ID: id, Type: "t", Schedule: job.Schedule{Delay: time.Hour}})
			require.NoError(t, err)
		}
		require.NoError(t, tb.client.Delete(ctx, "gone"))
		_, err := tb.client.Get(ctx, "gone")
		require.ErrorIs(t, err, shard.ErrNotFound)
		require.ErrorIs(t, tb.client.Delete(ctx, "gone"), shard.ErrNotFound)
		_, _, err = tb.client.Cancel(ctx, "kept")
		require.NoError(t, err)
		info, err := tb.client.Get(ctx, "kept")
		require.NoError(t, err)
		require.Equal(t, job.StateCancelled, info.State)
	})
}

// The Client's workflow methods: CreateWorkflow leaves the caller's workflow as it was
// (normalising reorders the nodes and fills their defaults), and retried with it finds
// the workflow; a scheduled workflow's definition is paused, resumed, triggered and
// deleted through the workflow methods, which refuse a job that is no definition.
func TestClient_Workflows(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		w := &job.Workflow{ID: "wf", Jobs: []job.Node{
			{Job: job.Job{ID: "b", Type: "t"}, DependsOn: []string{"a"}},
			{Job: job.Job{ID: "a", Type: "t", Retry: job.RetryPolicy{MaxAttempts: 1, Jitter: -1}}},
		}}
		before := *w
		before.Jobs = append([]job.Node(nil), w.Jobs...)
		res, err := tb.client.CreateWorkflow(ctx, w)
		require.NoError(t, err)
		require.True(t, res.Created)
		require.Equal(t, before, *w, "CreateWorkflow must not change the caller's workflow")
		_, err = tb.client.CreateWorkflow(ctx, nil)
		require.EqualError(t, err, "create workflow: no workflow (nil)")
		again, err := tb.client.CreateWorkflow(ctx, w)
		require.NoError(t, err)
		require.False(t, again.Created)
		require.False(t, again.Conflict)

		info, err := tb.client.Workflow(ctx, "wf")
		require.NoError(t, err)
		require.Equal(t, job.WorkflowRunning, info.State)
		require.Equal(t, "a", info.Nodes[0].ID)
		page, err := tb.client.ListWorkflows(ctx, shard.WorkflowFilter{State: job.WorkflowRunning})
		require.NoError(t, err)
		for page.Next != "" {
			more, err := tb.client.ListWorkflows(ctx, shard.WorkflowFilter{State: job.WorkflowRunning, Cursor: page.Next})
			require.NoError(t, err)
			page.Workflows = append(page.Workflows, more.Workflows...)
			page.Next = more.Next
		}
		require.Len(t, page.Workflows, 1)

		// a succeeds with a result; cancel ends b; retry runs b alone.
		id := tb.store.ShardOf("wf")
		runs, err := tb.store.Claim(ctx, id, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, runs, 1)
		_, err = tb.store.FinishRuns(ctx, id, []shard.Finish{{Member: runs[0].Member, Token: runs[0].Token, Outcome: shard.Succeeded, Result: []byte("42")}})
		require.NoError(t, err)
		r, ok, err := tb.client.NodeResult(ctx, "wf", "a")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "42", string(r))
		st, changed, err := tb.client.CancelWorkflow(ctx, "wf")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.WorkflowCancelled, st)
		st, changed, err = tb.client.RetryWorkflow(ctx, "wf")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.WorkflowRunning, st)
		_, _, err = tb.client.CancelWorkflow(ctx, "nope")
		require.ErrorIs(t, err, tock.ErrWorkflowNotFound)

		_, err = tb.client.CreateWorkflow(ctx, &job.Workflow{ID: "nightly", Jobs: []job.Node{{Job: job.Job{ID: "a", Type: "t"}}},
			Schedule: &job.Schedule{Cron: "0 3 * * *"}})
		require.NoError(t, err)
		js, changed, err := tb.client.PauseWorkflow(ctx, "nightly")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.StatePaused, js)
		_, changed, err = tb.client.ResumeWorkflow(ctx, "nightly")
		require.NoError(t, err)
		require.True(t, changed)
		run, inst, err := tb.client.TriggerWorkflow(ctx, "nightly")
		require.NoError(t, err)
		_, due, ok := shard.SplitMember(run)
		require.True(t, ok)
		require.Equal(t, shard.InstanceID("nightly", time.UnixMilli(due)), inst)
		require.NoError(t, tb.client.DeleteWorkflow(ctx, "nightly"))
		require.ErrorIs(t, tb.client.DeleteWorkflow(ctx, "nightly"), tock.ErrWorkflowNotFound)
		_, err = tb.client.Create(ctx, &job.Job{ID: "plain", Type: "t", Schedule: job.Schedule{Cron: "@daily"}})
		require.NoError(t, err)
		_, _, err = tb.client.PauseWorkflow(ctx, "plain")
		require.ErrorIs(t, err, tock.ErrWorkflowNotFound)
		got, err := tb.client.Get(ctx, "plain")
		require.NoError(t, err)
		require.Equal(t, job.StateScheduled, got.State)
		// Leave nothing running for the counts check.
		_, _, err = tb.client.CancelWorkflow(ctx, "wf")
		require.NoError(t, err)
	})
}
