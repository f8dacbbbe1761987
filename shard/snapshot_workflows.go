package shard

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tockhq/tock/job"
)

// WorkflowRecord is one workflow as a snapshot holds it: the fields of its hash (see
// Keys.Workflow and lua/include/workflow.lua), its expiry time, and its nodes' jobs, all
// read in one atomic step (ReadWorkflows) so that they agree.
type WorkflowRecord struct {
	ID string
	// Fields are the workflow hash's field/value pairs, as stored.
	Fields []string
	// ExpireAt is when the workflow hash expires, ms since the epoch on the Redis clock;
	// 0 never (a workflow expires Config.Retention after it ends).
	ExpireAt int64
	// Nodes are its nodes' jobs (ids job.NodeJobID), those that exist.
	Nodes []JobRecord
}

// Workflow snapshot batches.
const (
	// readWorkflowIDs bounds the workflow ids of one read_workflows call, and
	// readWorkflowNodes the nodes it reads before it stops (at least one workflow whole).
	readWorkflowIDs   = 50
	readWorkflowNodes = 2000
	// restoreWorkflowNodes bounds the node jobs of one restore_workflows call (at least
	// one workflow whole, however many nodes it has).
	restoreWorkflowNodes = 2000
)

// ReadWorkflows reads whole workflows of shard id: each workflow's hash and expiry with
// its nodes' jobs in one atomic step (read_workflows), so a workflow and its nodes agree,
// whatever runs meanwhile; different workflows may be read at different moments. ReadJobs
// leaves out the jobs of nodes whose workflow exists. Workflows that do not exist are
// left out. A call reads a few thousand nodes at most, but one workflow is read whole
// however many nodes it has: Redis runs nothing else meanwhile (about 10 µs a node).
func (s *Store) ReadWorkflows(ctx context.Context, id ID, wfIDs []string) ([]WorkflowRecord, error) {
	var out []WorkflowRecord
	bucket := strconv.FormatInt(s.bucketMs, 10)
	budget := strconv.Itoa(readWorkflowNodes)
	pending := [][]string{}
	for ids := wfIDs; len(ids) > 0; {
		n := min(len(ids), readWorkflowIDs)
		pending = append(pending, ids[:n])
		ids = ids[n:]
	}
	for len(pending) > 0 {
		calls := make([]call, len(pending))
		for i, ids := range pending {
			args := append([]string{s.keys.Prefix(id), bucket, budget}, ids...)
			calls[i] = call{s.scripts.ReadWorkflows, []string{s.keys.Buckets(id)}, args}
		}
		var rest [][]string
		for i, r := range s.exec(ctx, calls...) {
			reply, err := r.ToArray()
			if err == nil && len(reply) == 0 {
				err = fmt.Errorf("empty reply")
			}
			if err != nil {
				return nil, fmt.Errorf("read workflows of shard %d: %w", id, err)
			}
			consumed := int(i64(reply[0]))
			if consumed < 1 || consumed > len(pending[i]) {
				return nil, fmt.Errorf("read workflows of shard %d: %d of %d ids handled", id, consumed, len(pending[i]))
			}
			if consumed < len(pending[i]) {
				rest = append(rest, pending[i][consumed:])
			}
			for _, m := range reply[1:] {
				w, err := m.ToArray()
				if err == nil && len(w) != 4 {
					err = fmt.Errorf("workflow of %d entries, want 4", len(w))
				}
				if err != nil {
					return nil, fmt.Errorf("read workflows of shard %d: %w", id, err)
				}
				rec := WorkflowRecord{ID: str(w[0]), Fields: strs(w[2])}
				if exp := i64(w[1]); exp > 0 {
					rec.ExpireAt = exp
				}
				nodes, err := w[3].ToArray()
				if err == nil && len(nodes)%3 != 0 {
					err = fmt.Errorf("workflow %q: %d node entries, want 3 per node", rec.ID, len(nodes))
				}
				if err != nil {
					return nil, fmt.Errorf("read workflows of shard %d: %w", id, err)
				}
				for k := 0; k < len(nodes); k += 3 {
					j := JobRecord{ID: str(nodes[k]), Fields: strs(nodes[k+2])}
					if exp := i64(nodes[k+1]); exp > 0 {
						j.ExpireAt = exp
					}
					rec.Nodes = append(rec.Nodes, j)
				}
				out = append(out, rec)
			}
		}
		pending = rest
	}
	return out, nil
}

// RestoreWorkflows writes workflows read by ReadWorkflows into shard id, each with its
// nodes' jobs in one step (restore_workflows), so no node's run can end before its
// workflow is there: a node waiting for its parents stays waiting, a released node's run
// is ready, a node's run in flight is ready again without using an attempt (as
// RestoreJobs files a job's runs); the workflow continues from there. A running
// scheduled instance rejoins its definition's running or buffered instances; call
// SettleDefinitions once every workflow is restored. An ended workflow's count of nodes
// whose runs are dead (it has no expiry while there are any) is counted again from the
// node jobs as restored; without any it expires at the record's time, or
// Config.Retention from now when the record has none. A workflow whose id exists is left
// as it is, with its nodes; one whose expiry time has passed is skipped. The counts
// cover the workflows (Workflows...) and their node jobs (Restored, Existed, Expired).
// The calls go in one pipeline; dispatchers and workers are signalled as after a create.
// On error, the counts cover the calls that succeeded.
func (s *Store) RestoreWorkflows(ctx context.Context, id ID, recs []WorkflowRecord) (RestoreCounts, error) {
	var calls []call
	for len(recs) > 0 {
		args := []string{s.keys.Prefix(id), strconv.FormatInt(s.bucketMs, 10),
			strconv.FormatInt(s.cfg.Retention.Milliseconds(), 10), ""}
		n, nodes, size := 0, 0, 0
		for ; n < len(recs) && (n == 0 || (nodes < restoreWorkflowNodes && size < restoreBatchBytes)); n++ {
			r := recs[n]
			args = append(args, r.ID, strconv.FormatInt(r.ExpireAt, 10), strconv.Itoa(len(r.Fields)/2))
			args = append(args, r.Fields...)
			args = append(args, strconv.Itoa(len(r.Nodes)))
			for _, f := range r.Fields {
				size += len(f)
			}
			for _, j := range r.Nodes {
				var sz int
				args, sz = appendJobRecord(args, j)
				size += sz
			}
			nodes += len(r.Nodes)
		}
		args[3] = strconv.Itoa(n)
		calls = append(calls, call{s.scripts.RestoreWorkflows, []string{s.keys.Buckets(id), s.keys.Dead(id)}, args})
		recs = recs[n:]
	}
	var counts RestoreCounts
	var firstErr error
	var msgs [][2]string
	for _, r := range s.exec(ctx, calls...) {
		reply, err := r.ToArray()
		if err == nil && len(reply) != 8 {
			err = fmt.Errorf("restore_workflows: reply of %d entries, want 8", len(reply))
		}
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("restore workflows into shard %d: %w", id, err)
			}
			continue
		}
		counts.Workflows += int(i64(reply[0]))
		counts.WorkflowsExisted += int(i64(reply[1]))
		counts.WorkflowsExpired += int(i64(reply[2]))
		counts.Restored += int(i64(reply[3]))
		counts.Existed += int(i64(reply[4]))
		counts.Expired += int(i64(reply[5]))
		if wake := i64(reply[6]); wake > 0 {
			msgs = append(msgs, s.wakeSignal(id, wake))
		}
		msgs = s.readySignals(msgs, id, strs(reply[7]))
	}
	s.publish(ctx, msgs)
	return counts, firstErr
}

// SettleDefinitions ends a restore of scheduled workflows into shard id: the definitions
// defs (their ids) keep as running and buffered instances only those that run and are
// held, and a buffered instance that no running one is left to start starts now
// (settle_definitions). It returns how many started. Safe to call again.
func (s *Store) SettleDefinitions(ctx context.Context, id ID, defs []string) (int, error) {
	started := 0
	var msgs [][2]string
	for len(defs) > 0 {
		n := min(len(defs), readBatch)
		args := append([]string{s.keys.Prefix(id)}, defs[:n]...)
		defs = defs[n:]
		reply, err := s.exec(ctx, call{s.scripts.SettleDefinitions, []string{s.keys.Buckets(id)}, args})[0].ToArray()
		if err == nil && len(reply) != 2 {
			err = fmt.Errorf("reply of %d entries, want 2", len(reply))
		}
		if err != nil {
			s.publish(ctx, msgs)
			return started, fmt.Errorf("settle workflow definitions of shard %d: %w", id, err)
		}
		started += int(i64(reply[0]))
		msgs = s.readySignals(msgs, id, strs(reply[1]))
	}
	s.publish(ctx, msgs)
	return started, nil
}

// DefinitionOf returns the definition of scheduled workflow instance wf (its id before
// the '@'), or ok false for a workflow created on its own.
func DefinitionOf(wf string) (def string, ok bool) {
	for i := 0; i < len(wf); i++ {
		if wf[i] == job.NodeSep {
			return wf[:i], i > 0
		}
	}
	return "", false
}
