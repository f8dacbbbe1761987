package snapshot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
)

// editRecords rewrites the records of shard file i of the bundle's snapshot with fn
// (records as JSON objects, in file order), and the manifest to match.
func (cb *corruptBundle) editRecords(t *testing.T, i int, fn func(recs []map[string]any) []map[string]any) {
	t.Helper()
	name := cb.m.Files[i].Name
	raw, err := os.ReadFile(cb.path(name))
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	dec := json.NewDecoder(zr)
	var recs []map[string]any
	for dec.More() {
		var r map[string]any
		require.NoError(t, dec.Decode(&r))
		recs = append(recs, r)
	}
	recs = fn(recs)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	enc := json.NewEncoder(zw)
	jobs, wfs := 0, 0
	for _, r := range recs {
		require.NoError(t, enc.Encode(r))
		if nodes, ok := r["nodes"].([]any); ok {
			jobs += len(nodes)
			wfs++
		} else if _, ok := r["wf"]; ok {
			wfs++
		} else {
			jobs++
		}
	}
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(cb.path(name), out.Bytes(), 0o644))
	cb.editManifest(t, func(m map[string]any) {
		cb.setFile(t, m, i)
		m["jobs"] = m["jobs"].(float64) - file(m, i)["jobs"].(float64) + float64(jobs)
		file(m, i)["jobs"] = jobs
		m["workflows"] = m["workflows"].(float64) - file(m, i)["workflows"].(float64) + float64(wfs)
		file(m, i)["workflows"] = wfs
	})
}

// exportOf exports src (one shard) into a fresh directory and returns the bundle, with an
// empty namespace to restore into.
func exportOf(t *testing.T, b redistest.Backend, src *shard.Store) *corruptBundle {
	t.Helper()
	ctx := context.Background()
	cb := &corruptBundle{src: src, dst: open(t, b, src.Client(), shard.Config{Shards: 1})}
	var root string
	cb.bk, root = dirBucket(t)
	var err error
	cb.m, err = snapshot.Export(ctx, src, cb.bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	cb.dir = filepath.Join(root, filepath.FromSlash(cb.m.ID))
	cb.editManifest(t, func(m map[string]any) {
		if _, ok := m["workflows"]; !ok {
			m["workflows"] = 0.0
		}
		if _, ok := file(m, 0)["workflows"]; !ok {
			file(m, 0)["workflows"] = 0.0
		}
	})
	return cb
}

// byID sorts job records by id.
func byID(recs []map[string]any) {
	sort.Slice(recs, func(a, c int) bool {
		x, _ := recs[a]["id"].(string)
		y, _ := recs[c]["id"].(string)
		return x < y
	})
}

// A job record whose fields the restore cannot file (a run due time that is no number, a
// priority that is no digit, an unknown state, ...) is refused by Verify, naming the job
// and the field, before anything is written. Before the fix it passed Verify, and its
// restore_jobs call failed half-way: the jobs written before it in the call were left
// without their ready runs (and counts), and a resumed restore left them so, as existing.
func TestRestore_RefusesJobRecordsItCannotFile(t *testing.T) {
	t.Parallel()
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	for _, tc := range []struct {
		name, field, value, msg string
	}{
		{"RunListNotNumbers", "rl", ",abc,", `field "rl"`},
		{"PriorityNotADigit", "pr", "x", `field "pr"`},
		{"UnknownState", "st", "exploded", `field "st"`},
		{"RunFieldNotARun", "r1767366245123", "garbage", `field "r1767366245123"`},
		{"RunFieldNotADueTime", "rx", "ready|0|0||||", `field "rx"`},
		{"QueueNotAName", "q", "a b", `field "q"`},
		{"NextRunNotANumber", "nx", "soon", `field "nx"`},
		{"MaxAttemptsNotANumber", "ma", "many", `field "ma"`},
		{"EmptyFieldName", "", "x", `field ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src := open(t, b, rc, shard.Config{Shards: 1})
			_, err := src.Create(ctx, []*job.Job{
				{ID: "a-good", Type: "t", Schedule: job.Schedule{Now: true}},
				{ID: "b-bad", Type: "t", Schedule: job.Schedule{Now: true}},
			})
			require.NoError(t, err)
			cb := exportOf(t, b, src)
			cb.editRecords(t, 0, func(recs []map[string]any) []map[string]any {
				byID(recs)
				require.Equal(t, "b-bad", recs[1]["id"])
				recs[1]["f"].(map[string]any)[tc.field] = tc.value
				return recs
			})
			cb.refused(t, corrupt(t, "shard-0000.ndjson.gz", `job "b-bad"`, tc.msg))
		})
	}
}

// wfField reads field f of workflow wf's hash in st ("" when absent), and its expiry
// (PTTL: -1 none).
func wfField(t *testing.T, st *shard.Store, wf, f string) (string, int64) {
	t.Helper()
	ctx := context.Background()
	rc := st.Client()
	key := st.Keys().Workflow(st.ShardOf(wf), wf)
	v, err := rc.Do(ctx, rc.B().Hget().Key(key).Field(f).Build()).ToString()
	if err != nil {
		v = ""
	}
	ttl, err := rc.Do(ctx, rc.B().Pttl().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return v, ttl
}

// A failed workflow's 'dd' (its nodes whose runs are dead: it has no expiry while there
// are any) is counted again from the nodes' jobs the restore wrote, not taken from the
// record: a record whose count disagrees with its nodes' jobs (a dead node's job
// missing, or a count and an expiry from a build before 'dd' while a node's job is dead)
// came back, before the fix, as a workflow that never expired (no dead run left to
// delete) or that expired while its node's run was still dead.
func TestRestore_WorkflowDeadCountFollowsTheRestoredNodes(t *testing.T) {
	t.Parallel()
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	for _, tc := range []struct {
		name string
		edit func(wf map[string]any)
		dd   string // after the restore
		kept bool   // no expiry after the restore
	}{
		{"DeadNodesJobMissing", func(wf map[string]any) {
			var nodes []any
			for _, n := range wf["nodes"].([]any) {
				if n.(map[string]any)["id"] != "w@f" {
					nodes = append(nodes, n)
				}
			}
			wf["nodes"] = nodes
		}, "", false},
		{"NoCountButADeadNode", func(wf map[string]any) {
			delete(wf["f"].(map[string]any), "dd")
			wf["exp"] = float64(time.Now().Add(time.Hour).UnixMilli())
		}, "1", true},
		{"AsExported", func(map[string]any) {}, "1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src := open(t, b, rc, shard.Config{Shards: 1})
			_, err := src.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: []job.Node{wfNode("a", "qa", ""), wfNode("f", "qf", "")}})
			require.NoError(t, err)
			finishOne(t, src, claimOne(t, src, "w", "qa"), shard.Succeeded, "")
			finishOne(t, src, claimOne(t, src, "w", "qf"), shard.Failed, "")
			dd, ttl := wfField(t, src, "w", "dd")
			require.Equal(t, "1", dd)
			require.Equal(t, int64(-1), ttl)

			cb := exportOf(t, b, src)
			cb.editRecords(t, 0, func(recs []map[string]any) []map[string]any {
				require.Len(t, recs, 1)
				tc.edit(recs[0])
				return recs
			})
			_, err = snapshot.Restore(ctx, cb.dst, cb.bk, cb.m.ID, snapshot.ReadOptions{})
			require.NoError(t, err)
			dd, ttl = wfField(t, cb.dst, "w", "dd")
			require.Equal(t, tc.dd, dd)
			if tc.kept {
				require.Equal(t, int64(-1), ttl, "kept while its node's run is dead")
				dead, _, err := cb.dst.Dead(ctx, "qf", 10, "")
				require.NoError(t, err)
				require.Len(t, dead, 1)
				require.NoError(t, cb.dst.DeleteDead(ctx, dead[0].Member))
				_, ttl = wfField(t, cb.dst, "w", "dd")
			}
			require.Positive(t, ttl, "an ended workflow without dead runs expires")
			require.LessOrEqual(t, ttl, job.DefaultRetention.Milliseconds())
		})
	}
}

// A workflow record without the job of a node that waits for its parents or was
// released is refused, naming the node: restored, that node would never run nor end, and
// its workflow would run for ever. Before the fix it passed Verify and was restored so.
// An ended node's job may be missing (it expired before its workflow).
func TestRestore_RefusesAWorkflowWithoutAPendingNodesJob(t *testing.T) {
	t.Parallel()
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	for _, tc := range []struct {
		node, state string
	}{{"b", "waiting"}, {"a", "released"}} {
		t.Run(tc.state, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src := open(t, b, rc, shard.Config{Shards: 1})
			_, err := src.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: []job.Node{wfNode("a", "qa", ""), wfNode("b", "qb", "", "a")}})
			require.NoError(t, err)
			cb := exportOf(t, b, src)
			cb.editRecords(t, 0, func(recs []map[string]any) []map[string]any {
				require.Len(t, recs, 1)
				var nodes []any
				for _, n := range recs[0]["nodes"].([]any) {
					if n.(map[string]any)["id"] != "w@"+tc.node {
						nodes = append(nodes, n)
					}
				}
				recs[0]["nodes"] = nodes
				return recs
			})
			cb.refused(t, corrupt(t, "shard-0000.ndjson.gz", `workflow "w": node "`+tc.node+`" is `+tc.state+` and its job "w@`+tc.node+`" is missing`))
		})
	}

	// An ended node's job that expired before its workflow: restored as it is.
	ctx := context.Background()
	src := open(t, b, rc, shard.Config{Shards: 1})
	_, err := src.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: []job.Node{wfNode("a", "qa", ""), wfNode("b", "qb", "", "a")}})
	require.NoError(t, err)
	finishOne(t, src, claimOne(t, src, "w", "qa"), shard.Succeeded, "")
	cb := exportOf(t, b, src)
	cb.editRecords(t, 0, func(recs []map[string]any) []map[string]any {
		nodes := recs[0]["nodes"].([]any)
		require.Len(t, nodes, 2)
		if nodes[0].(map[string]any)["id"] == "w@a" {
			recs[0]["nodes"] = nodes[1:]
		} else {
			recs[0]["nodes"] = nodes[:1]
		}
		return recs
	})
	res, err := snapshot.Restore(ctx, cb.dst, cb.bk, cb.m.ID, snapshot.ReadOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Workflows)
	finishOne(t, cb.dst, claimOne(t, cb.dst, "w", "qb"), shard.Succeeded, "")
	w, err := cb.dst.Workflow(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, job.WorkflowSucceeded, w.State)
}
