package snapshot_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
	"github.com/tockhq/tock/snapshot"
)

// wfNode is a node of queue q (so that a claim takes just its run), one attempt.
func wfNode(id, q string, rule job.Rule, deps ...string) job.Node {
	return job.Node{Job: job.Job{ID: id, Type: "t", Queue: q, Retry: job.RetryPolicy{MaxAttempts: 1}}, DependsOn: deps, Rule: rule}
}

// claimOne claims the one ready run of queue q on shard of id.
func claimOne(t *testing.T, st *shard.Store, id, q string) shard.Claimed {
	t.Helper()
	c, err := st.Claim(context.Background(), st.ShardOf(id), q, 10, "w", "n")
	require.NoError(t, err)
	require.Len(t, c, 1, q)
	return c[0]
}

func finishOne(t *testing.T, st *shard.Store, c shard.Claimed, o shard.Outcome, result string) {
	t.Helper()
	f := shard.Finish{Member: c.Member, Token: c.Token, Outcome: o}
	if o == shard.Succeeded {
		f.Result = []byte(result)
	} else {
		f.Error = "no"
	}
	errs, err := st.FinishRuns(context.Background(), c.Shard, []shard.Finish{f})
	require.NoError(t, err)
	require.NoError(t, errs[0])
}

func nodeStates(w *shard.WorkflowInfo) map[string]job.NodeState {
	out := map[string]job.NodeState{}
	for _, n := range w.Nodes {
		out[n.ID] = n.State
	}
	return out
}

// A workflow caught mid-run (nodes succeeded with results, failed, upstream_failed,
// running, ready and waiting) comes back as it was, but for its running node's run,
// which is ready again as the same attempt; then it runs on to its end, its parents'
// results reaching the nodes that run after the restore.
func TestExportRestore_Workflow(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := ctxT(t)
		rc := b.Client(t)
		src := open(t, b, rc, shard.Config{Shards: 4})
		_, err := src.Create(ctx, []*job.Job{{ID: "plain", Type: "t", Queue: "q-plain", Schedule: job.Schedule{Now: true}}})
		require.NoError(t, err)
		wf := &job.Workflow{ID: "etl", Jobs: []job.Node{
			wfNode("a", "qa", ""),                           // succeeds, result "ra"
			wfNode("f", "qf", ""),                           // fails
			wfNode("u", "qu", job.RuleAllSuccess, "f"),      // upstream_failed
			wfNode("r", "qr", "", "a"),                      // running at the export
			wfNode("x", "qx", "", "a"),                      // ready at the export
			wfNode("w", "qw", job.RuleAllDone, "r", "f"),    // waiting at the export
			wfNode("z", "qz", job.RuleNoneFailed, "w", "x"), // waiting
		}}
		res, err := src.CreateWorkflow(ctx, wf)
		require.NoError(t, err)
		require.True(t, res.Created)
		finishOne(t, src, claimOne(t, src, "etl", "qa"), shard.Succeeded, "ra")
		finishOne(t, src, claimOne(t, src, "etl", "qf"), shard.Failed, "")
		running := claimOne(t, src, "etl", "qr")
		shardtest.CheckCounts(t, src)
		want, err := src.Workflow(ctx, "etl")
		require.NoError(t, err)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeSucceeded, "f": job.NodeFailed, "u": job.NodeUpstreamFailed,
			"r": job.NodeRunning, "x": job.NodeReady, "w": job.NodeWaiting, "z": job.NodeWaiting}, nodeStates(want))

		bk, _ := dirBucket(t)
		m, err := snapshot.Export(ctx, src, bk, snapshot.ExportOptions{})
		require.NoError(t, err)
		require.Equal(t, snapshot.FormatVersion, m.Format)
		require.Equal(t, int64(1), m.Workflows)
		require.Equal(t, int64(1+len(wf.Jobs)), m.Jobs, "the plain job and the nodes' jobs")
		_, err = snapshot.Verify(ctx, bk, m.ID, snapshot.ReadOptions{})
		require.NoError(t, err)

		// The source's running node ends after the export: the restore does not know it.
		finishOne(t, src, running, shard.Succeeded, "late")

		dst := open(t, b, rc, shard.Config{Shards: 3})
		rr, err := snapshot.Restore(ctx, dst, bk, m.ID, snapshot.ReadOptions{})
		require.NoError(t, err)
		require.Equal(t, shard.RestoreCounts{Restored: 1 + len(wf.Jobs), Workflows: 1}, rr.RestoreCounts)
		shardtest.CheckCounts(t, dst)

		got, err := dst.Workflow(ctx, "etl")
		require.NoError(t, err)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeSucceeded, "f": job.NodeFailed, "u": job.NodeUpstreamFailed,
			"r": job.NodeReady, "x": job.NodeReady, "w": job.NodeWaiting, "z": job.NodeWaiting}, nodeStates(got))
		require.Equal(t, want.CreatedAt, got.CreatedAt)
		for i, n := range got.Nodes {
			w := want.Nodes[i]
			require.Equal(t, w.ID, n.ID)
			require.Equal(t, w.DependsOn, n.DependsOn, n.ID)
			require.Equal(t, w.Rule, n.Rule, n.ID)
			require.Equal(t, w.ReleasedAt, n.ReleasedAt, n.ID)
			require.Equal(t, w.EndedAt, n.EndedAt, n.ID)
			require.Equal(t, w.ResultSize, n.ResultSize, n.ID)
		}
		result, ok, err := dst.NodeResult(ctx, "etl", "a")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "ra", string(result))
		for _, id := range []string{"etl@w", "etl@z"} {
			info, err := dst.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, job.StateWaiting, info.State, id)
		}
		for _, id := range []string{"etl@a", "etl@f", "etl@u"} {
			wantJob, err := src.Get(ctx, id)
			require.NoError(t, err)
			gotJob, err := dst.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, wantJob.State, gotJob.State, id)
		}
		dead, _, err := dst.Dead(ctx, "qf", 10, "")
		require.NoError(t, err)
		require.Len(t, dead, 1, "the failed node's run is dead")

		// It runs on: r again as its first attempt, then w, then z.
		r := claimOne(t, dst, "etl", "qr")
		require.Equal(t, 1, r.Attempt)
		finishOne(t, dst, r, shard.Succeeded, "rr")
		finishOne(t, dst, claimOne(t, dst, "etl", "qx"), shard.Succeeded, "rx")
		w := claimOne(t, dst, "etl", "qw")
		parents, err := dst.ParentResults(ctx, w.JobID)
		require.NoError(t, err)
		require.Equal(t, map[string][]byte{"r": []byte("rr")}, parents, "f failed: no result")
		finishOne(t, dst, w, shard.Succeeded, "rw")
		z := claimOne(t, dst, "etl", "qz")
		parents, err = dst.ParentResults(ctx, z.JobID)
		require.NoError(t, err)
		require.Equal(t, map[string][]byte{"w": []byte("rw"), "x": []byte("rx")}, parents)
		finishOne(t, dst, z, shard.Succeeded, "")
		end, err := dst.Workflow(ctx, "etl")
		require.NoError(t, err)
		require.Equal(t, job.WorkflowFailed, end.State, "f failed")
		require.Equal(t, map[string]job.NodeState{"a": job.NodeSucceeded, "f": job.NodeFailed, "u": job.NodeUpstreamFailed,
			"r": job.NodeSucceeded, "x": job.NodeSucceeded, "w": job.NodeSucceeded, "z": job.NodeSucceeded}, nodeStates(end))
		require.True(t, end.Expires.IsZero(), "a failed workflow stays while a node's run is dead")
		require.NoError(t, dst.DeleteDead(ctx, dead[0].Member))
		end, err = dst.Workflow(ctx, "etl")
		require.NoError(t, err)
		require.False(t, end.Expires.IsZero(), "an ended workflow expires")
		shardtest.CheckCounts(t, dst)

		// The plain job came back too, and a node's job is not exported twice.
		_, err = dst.Get(ctx, "plain")
		require.NoError(t, err)
	})
}

// A scheduled workflow's instances come back with their definition's overlap state: a
// held (buffer_one) instance stays held behind the running one and starts when it ends.
// When the running instance is not in the snapshot (it ended between the two reads), the
// held one starts at the end of the restore, as it would have.
func TestExportRestore_ScheduledInstances(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := ctxT(t)
		rc := b.Client(t)
		src := open(t, b, rc, shard.Config{Shards: 2})
		t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, def := range []string{"nightly", "orphaned"} {
			_, err := src.CreateWorkflow(ctx, &job.Workflow{ID: def, Jobs: []job.Node{wfNode("a", "q-"+def, "")},
				Schedule: &job.Schedule{Cron: "0 3 * * *"}, Overlap: job.OverlapBufferOne})
			require.NoError(t, err)
			info, err := src.Get(ctx, def)
			require.NoError(t, err)
			first, err := src.StartInstance(ctx, def, t0, info.Payload)
			require.NoError(t, err)
			require.True(t, first.Created)
			second, err := src.StartInstance(ctx, def, t0.Add(24*time.Hour), info.Payload)
			require.NoError(t, err)
			require.True(t, second.Held)
		}
		// As if "orphaned"'s running instance had ended and gone just before the export
		// read it: its held one is in the snapshot, it is not. (Its node's job stays: a job
		// whose workflow is gone is exported as a job.)
		first := shard.InstanceID("orphaned", t0)
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(src.Keys().Workflow(src.ShardOf(first), first)).Build()).Error())

		bk, _ := dirBucket(t)
		m, err := snapshot.Export(ctx, src, bk, snapshot.ExportOptions{})
		require.NoError(t, err)
		require.Equal(t, int64(3), m.Workflows)
		require.Equal(t, int64(2+3+1), m.Jobs, "the definitions, the instances' nodes, the orphaned node")
		dst := open(t, b, rc, shard.Config{Shards: 3})
		_, err = snapshot.Restore(ctx, dst, bk, m.ID, snapshot.ReadOptions{})
		require.NoError(t, err)

		second := shard.InstanceID("orphaned", t0.Add(24*time.Hour))
		w, err := dst.Workflow(ctx, second)
		require.NoError(t, err)
		require.False(t, w.Held, "nothing runs before it: it starts")
		require.Equal(t, job.NodeReady, nodeStates(w)["a"])
		orphan, err := dst.Get(ctx, first+"@a")
		require.NoError(t, err)
		require.Equal(t, job.StateReady, orphan.State, "restored as a job")

		first = shard.InstanceID("nightly", t0)
		second = shard.InstanceID("nightly", t0.Add(24*time.Hour))
		w, err = dst.Workflow(ctx, second)
		require.NoError(t, err)
		require.True(t, w.Held, "still behind the running instance")
		finishOne(t, dst, claimOne(t, dst, first, "q-nightly"), shard.Succeeded, "")
		w, err = dst.Workflow(ctx, first)
		require.NoError(t, err)
		require.Equal(t, job.WorkflowSucceeded, w.State)
		w, err = dst.Workflow(ctx, second)
		require.NoError(t, err)
		require.False(t, w.Held, "the buffered instance starts when the running one ends")
		finishOne(t, dst, claimOne(t, dst, second, "q-nightly"), shard.Succeeded, "")
		w, err = dst.Workflow(ctx, second)
		require.NoError(t, err)
		require.Equal(t, job.WorkflowSucceeded, w.State)
		shardtest.CheckCounts(t, dst)
	})
}

// The instances of a definition deleted before the export come back with their
// definition's hash (the running one and the buffered one), which goes when the last of
// them ends: a restore leaves no hash of a definition that is gone.
func TestExportRestore_DeletedDefinitionsInstances(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := ctxT(t)
		rc := b.Client(t)
		src := open(t, b, rc, shard.Config{Shards: 2})
		t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		_, err := src.CreateWorkflow(ctx, &job.Workflow{ID: "del", Jobs: []job.Node{wfNode("a", "q-del", "")},
			Schedule: &job.Schedule{Cron: "0 3 * * *"}, Overlap: job.OverlapBufferOne})
		require.NoError(t, err)
		info, err := src.Get(ctx, "del")
		require.NoError(t, err)
		first, err := src.StartInstance(ctx, "del", t0, info.Payload)
		require.NoError(t, err)
		second, err := src.StartInstance(ctx, "del", t0.Add(24*time.Hour), info.Payload)
		require.NoError(t, err)
		require.True(t, second.Held)
		require.NoError(t, src.Delete(ctx, "del"))

		bk, _ := dirBucket(t)
		m, err := snapshot.Export(ctx, src, bk, snapshot.ExportOptions{})
		require.NoError(t, err)
		require.Equal(t, int64(2), m.Workflows)
		dst := open(t, b, rc, shard.Config{Shards: 3})
		_, err = snapshot.Restore(ctx, dst, bk, m.ID, snapshot.ReadOptions{})
		require.NoError(t, err)
		_, err = dst.Get(ctx, "del")
		require.ErrorIs(t, err, shard.ErrNotFound)
		id := dst.ShardOf("del")
		dk := dst.Keys().WorkflowDefinition(id, "del")
		d, err := rc.Do(ctx, rc.B().Hmget().Key(dk).Field("act", "bf").Build()).AsStrSlice()
		require.NoError(t, err)
		require.Equal(t, []string{"," + first.ID + ",", second.ID}, d, "rebuilt from the instances")

		finishOne(t, dst, claimOne(t, dst, first.ID, "q-del"), shard.Succeeded, "")
		w, err := dst.Workflow(ctx, second.ID)
		require.NoError(t, err)
		require.False(t, w.Held, "the buffered instance starts when the running one ends")
		finishOne(t, dst, claimOne(t, dst, second.ID, "q-del"), shard.Succeeded, "")
		n, err := rc.Do(ctx, rc.B().Exists().Key(dk).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "the last instance's end deletes the hash")
		shardtest.CheckCounts(t, dst)
	})
}

// Format 1 snapshots (jobs only) are read still; a snapshot's workflow counts are
// checked like its job counts.
func TestVerify_WorkflowFormats(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	src := open(t, b, rc, shard.Config{Shards: 1})
	_, err := src.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: []job.Node{wfNode("a", "q", "")}})
	require.NoError(t, err)
	cb := &corruptBundle{src: src, dst: open(t, b, rc, shard.Config{Shards: 1})}
	var root string
	cb.bk, root = dirBucket(t)
	cb.m, err = snapshot.Export(ctx, src, cb.bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	cb.dir = filepath.Join(root, filepath.FromSlash(cb.m.ID))
	require.Equal(t, int64(1), cb.m.Files[0].Workflows)

	cb.editManifest(t, func(m map[string]any) {
		file(m, 0)["workflows"] = 2
		m["workflows"] = 2
	})
	cb.refused(t, corrupt(t, "shard-0000.ndjson.gz", "1 workflows, the manifest says 2"))
	cb.editManifest(t, func(m map[string]any) { m["format"] = 1 })
	cb.refused(t, corrupt(t, "manifest.json", "2 workflows in a snapshot of format 1"))
	cb.editManifest(t, func(m map[string]any) {
		file(m, 0)["workflows"] = 0
		m["workflows"] = 0
	})
	cb.refused(t, corrupt(t, "shard-0000.ndjson.gz", "format 1 holds no workflows"))

	// A format 1 snapshot: jobs only, nodes' jobs among them (as format 1 exported them,
	// without their workflow). A node's job waiting for its parents stays waiting.
	only := open(t, b, rc, shard.Config{Shards: 1})
	_, err = only.CreateWorkflow(ctx, &job.Workflow{ID: "w2", Jobs: []job.Node{wfNode("a", "q", ""), wfNode("b", "q", "", "a")}})
	require.NoError(t, err)
	require.NoError(t, rc.Do(ctx, rc.B().Del().Key(only.Keys().Workflow(0, "w2")).Build()).Error())
	bk, dir := dirBucket(t)
	m, err := snapshot.Export(ctx, only, bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	require.Zero(t, m.Workflows)
	old := &corruptBundle{bk: bk, m: m, dir: filepath.Join(dir, filepath.FromSlash(m.ID))}
	old.editManifest(t, func(m map[string]any) { m["format"] = 1 })
	got, err := snapshot.Verify(ctx, bk, m.ID, snapshot.ReadOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, got.Format)
	dst := open(t, b, rc, shard.Config{Shards: 1})
	res, err := snapshot.RestoreVerified(ctx, dst, bk, got, snapshot.ReadOptions{})
	require.NoError(t, err)
	require.Equal(t, 2, res.Restored)
	for id, st := range map[string]job.State{"w2@a": job.StateReady, "w2@b": job.StateWaiting} {
		info, err := dst.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, st, info.State, id)
	}
	shardtest.CheckCounts(t, dst)
}
