package snapshot

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"sync"

	"github.com/klauspost/compress/gzip"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/tockhq/tock/shard"
)

// ReadOptions tunes Verify and Restore. The zero value is usable.
type ReadOptions struct {
	// Parallel is how many shard files are read at once. Default 4.
	Parallel int
}

func (o ReadOptions) withDefaults() (ReadOptions, error) {
	if o.Parallel == 0 {
		o.Parallel = 4
	}
	if o.Parallel < 1 {
		return o, fmt.Errorf("parallel must be at least 1, got %d", o.Parallel)
	}
	return o, nil
}

// Verify reads snapshot id whole and checks it: its manifest, and for every shard file
// its size, its SHA-256, its compression, every record, which shard each record belongs
// to and the record count. It returns the manifest, or a problem found: a *CorruptError
// naming the file and what is wrong with it (the first such file in the manifest's
// order), ErrIncomplete, ErrNotFound.
func Verify(ctx context.Context, b *blob.Bucket, id string, opts ReadOptions) (*Manifest, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("verify snapshot %s: %w", id, err)
	}
	m, err := ReadManifest(ctx, b, id)
	if err != nil {
		return nil, err
	}
	err = each(ctx, len(m.Files), opts.Parallel, func(ctx context.Context, i int) error {
		return readFile(ctx, b, m, m.Files[i], func(context.Context, item) error { return nil })
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// RestoreResult is what Restore did.
type RestoreResult struct {
	Manifest *Manifest
	// Resumed is set when an interrupted restore of the same snapshot was completed.
	Resumed bool
	shard.RestoreCounts
}

// Restore rebuilds the store's namespace from snapshot id. It first verifies the whole
// snapshot (see Verify) and writes nothing when it is incomplete or damaged; then it
// refuses a namespace that holds jobs or workflows (shard.ErrNotEmpty), unless it is
// completing an interrupted restore of the same snapshot: run again after a failure,
// Restore continues where it stopped (jobs restored already are left alone, so no run is
// filed twice).
//
// Jobs go back with their state, runs and history: runs in flight at the snapshot become
// ready again without using an attempt (they run at least once more); runs in flight of a
// cancelled job are dropped; every other run is filed where its state says (see
// lua/restore_jobs.lua). Finished jobs whose retention ended meanwhile are skipped. The
// paused queues are paused first, before any job is written. The store may have another shard count or bucket width than
// the snapshot's: each job goes to the shard its id maps to. Queue counts are rebuilt
// from what is restored; the count of runs fired starts again from the runs restored
// ready.
//
// Dispatchers and workers may already run on the namespace: restored runs are signalled
// to them as they are written. The files are read twice (verified, then restored), and
// a file that changed between the two readings stops the restore with a *CorruptError.
func Restore(ctx context.Context, st *shard.Store, b *blob.Bucket, id string, opts ReadOptions) (*RestoreResult, error) {
	m, err := Verify(ctx, b, id, opts)
	if err != nil {
		return nil, err
	}
	return RestoreVerified(ctx, st, b, m, opts)
}

// RestoreVerified is Restore of a snapshot whose manifest m Verify has just returned: it
// does not read the snapshot a second time before writing (a caller that needs the
// manifest to open the store reads the snapshot twice, not three times). A file that
// changed since still stops the restore with a *CorruptError, after some of its jobs were
// written.
func RestoreVerified(ctx context.Context, st *shard.Store, b *blob.Bucket, m *Manifest, opts ReadOptions) (*RestoreResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("restore snapshot %s: %w", m.ID, err)
	}
	res := &RestoreResult{Manifest: m}
	if res.Resumed, err = st.BeginRestore(ctx, m.ID); err != nil {
		return nil, fmt.Errorf("restore snapshot %s: %w", m.ID, err)
	}
	// Before any job: a ready run of a paused queue must never be claimable, also while
	// the restore runs (workers may watch the namespace) or after it stopped half-way.
	for _, q := range m.PausedQueues {
		if _, err := st.PauseQueue(ctx, q); err != nil {
			return res, fmt.Errorf("restore snapshot %s: %w", m.ID, err)
		}
	}
	var mu sync.Mutex
	defs := map[shard.ID]map[string]bool{} // scheduled workflows with running instances
	err = each(ctx, len(m.Files), opts.Parallel, func(ctx context.Context, i int) error {
		w := &restoreWriter{st: st, pending: map[shard.ID][]shard.JobRecord{},
			pendingWf: map[shard.ID][]shard.WorkflowRecord{}, defs: map[shard.ID]map[string]bool{}}
		err := readFile(ctx, b, m, m.Files[i], w.add)
		if err == nil {
			err = w.flushAll(ctx)
		}
		mu.Lock()
		res.Add(w.counts)
		for id, ds := range w.defs {
			if defs[id] == nil {
				defs[id] = map[string]bool{}
			}
			for d := range ds {
				defs[id][d] = true
			}
		}
		mu.Unlock()
		return err
	})
	if err != nil {
		return res, fmt.Errorf("restore snapshot %s: %w", m.ID, err)
	}
	// Once every instance is back: a buffered instance whose running one did not come
	// back (it had ended when it was read) starts.
	for id, ds := range defs {
		names := make([]string, 0, len(ds))
		for d := range ds {
			names = append(names, d)
		}
		sort.Strings(names)
		if _, err := st.SettleDefinitions(ctx, id, names); err != nil {
			return res, fmt.Errorf("restore snapshot %s: %w", m.ID, err)
		}
	}
	if err := st.EndRestore(ctx); err != nil {
		return res, fmt.Errorf("restore snapshot %s: %w", m.ID, err)
	}
	return res, nil
}

// Restore batches: a shard's jobs are written once this many are pending, and every
// shard's once the pending jobs hold this many bytes.
const (
	restoreFlushJobs  = 1000
	restoreFlushBytes = 32 << 20
)

// restoreWriter batches the jobs and workflows of one file per target shard.
type restoreWriter struct {
	st        *shard.Store
	pending   map[shard.ID][]shard.JobRecord
	pendingWf map[shard.ID][]shard.WorkflowRecord
	wfNodes   map[shard.ID]int // nodes pending in pendingWf
	bytes     int
	counts    shard.RestoreCounts
	// defs are the definitions of the running scheduled instances met, per shard.
	defs map[shard.ID]map[string]bool
}

// add queues one job or workflow, writing batches as they fill.
func (w *restoreWriter) add(ctx context.Context, it item) error {
	if it.workflow != nil {
		return w.addWorkflow(ctx, *it.workflow)
	}
	j := it.job
	id := w.st.ShardOf(j.ID)
	w.pending[id] = append(w.pending[id], j)
	w.bytes += jobBytes(j)
	if len(w.pending[id]) >= restoreFlushJobs {
		return w.flush(ctx, id)
	}
	if w.bytes >= restoreFlushBytes {
		return w.flushAll(ctx)
	}
	return nil
}

func (w *restoreWriter) addWorkflow(ctx context.Context, r shard.WorkflowRecord) error {
	id := w.st.ShardOf(r.ID)
	if def, ok := shard.DefinitionOf(r.ID); ok {
		if w.defs[id] == nil {
			w.defs[id] = map[string]bool{}
		}
		w.defs[id][def] = true
	}
	if w.wfNodes == nil {
		w.wfNodes = map[shard.ID]int{}
	}
	w.pendingWf[id] = append(w.pendingWf[id], r)
	w.wfNodes[id] += len(r.Nodes) + 1
	w.bytes += workflowBytes(r)
	if w.wfNodes[id] >= restoreFlushJobs {
		return w.flushWorkflows(ctx, id)
	}
	if w.bytes >= restoreFlushBytes {
		return w.flushAll(ctx)
	}
	return nil
}

func jobBytes(j shard.JobRecord) int {
	n := 0
	for _, f := range j.Fields {
		n += len(f)
	}
	return n
}

func workflowBytes(r shard.WorkflowRecord) int {
	n := jobBytes(shard.JobRecord{Fields: r.Fields})
	for _, j := range r.Nodes {
		n += jobBytes(j)
	}
	return n
}

func (w *restoreWriter) flush(ctx context.Context, id shard.ID) error {
	jobs := w.pending[id]
	delete(w.pending, id)
	for _, j := range jobs {
		w.bytes -= jobBytes(j)
	}
	c, err := w.st.RestoreJobs(ctx, id, jobs)
	w.counts.Add(c)
	return err
}

func (w *restoreWriter) flushWorkflows(ctx context.Context, id shard.ID) error {
	wfs := w.pendingWf[id]
	delete(w.pendingWf, id)
	delete(w.wfNodes, id)
	for _, r := range wfs {
		w.bytes -= workflowBytes(r)
	}
	c, err := w.st.RestoreWorkflows(ctx, id, wfs)
	w.counts.Add(c)
	return err
}

func (w *restoreWriter) flushAll(ctx context.Context) error {
	for id := range w.pending {
		if err := w.flush(ctx, id); err != nil {
			return err
		}
	}
	for id := range w.pendingWf {
		if err := w.flushWorkflows(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// readFile reads shard file f of snapshot m and calls fn with each job, checking the file
// as it goes (see Verify). fn may be called before a problem further on is found.
func readFile(ctx context.Context, b *blob.Bucket, m *Manifest, f File, fn func(context.Context, item) error) error {
	corrupt := func(format string, args ...any) error {
		return &CorruptError{ID: m.ID, File: f.Name, Msg: fmt.Sprintf(format, args...)}
	}
	key := m.ID + "/" + f.Name
	attrs, err := b.Attributes(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return corrupt("missing")
	}
	if err != nil {
		return fmt.Errorf("snapshot %s: read %s: %w", m.ID, f.Name, err)
	}
	if attrs.Size != f.Bytes {
		return corrupt("%d bytes, the manifest says %d (truncated or replaced)", attrs.Size, f.Bytes)
	}
	r, err := b.NewReader(ctx, key, nil)
	if err != nil {
		return fmt.Errorf("snapshot %s: read %s: %w", m.ID, f.Name, err)
	}
	defer r.Close()
	src := &hashReader{r: r, h: sha256.New()}
	// checksum reads what is left of the file and checks its size and SHA-256.
	checksum := func() error {
		if _, err := io.Copy(io.Discard, src); err != nil {
			return fmt.Errorf("snapshot %s: read %s: %w", m.ID, f.Name, err)
		}
		if src.n != f.Bytes {
			return corrupt("%d bytes read, the manifest says %d (truncated or replaced)", src.n, f.Bytes)
		}
		if got := hex.EncodeToString(src.h.Sum(nil)); got != f.SHA256 {
			return corrupt("SHA-256 %s, the manifest says %s (damaged or replaced)", got, f.SHA256)
		}
		return nil
	}
	var n, jobs, workflows int64 // records, jobs (and nodes), workflows
	var fnErr error
	err = decode(bufio.NewReaderSize(src, 64<<10), func(r record) error {
		it, err := r.item(m.Format)
		if err != nil {
			return corrupt("record %d: %v", n+1, err)
		}
		n++
		if it.workflow != nil {
			if sh := shard.Of(it.workflow.ID, m.Shards); int(sh) != f.Shard {
				return corrupt("record %d: workflow %q belongs to shard %d", n, it.workflow.ID, sh)
			}
			if workflows++; workflows > f.Workflows {
				return corrupt("more than the %d workflows the manifest says", f.Workflows)
			}
		} else if sh := shard.Of(it.job.ID, m.Shards); int(sh) != f.Shard {
			return corrupt("record %d: job %q belongs to shard %d", n, it.job.ID, sh)
		}
		if jobs += it.jobs(); jobs > f.Jobs {
			return corrupt("more than the %d jobs the manifest says", f.Jobs)
		}
		fnErr = fn(ctx, it)
		return fnErr
	})
	switch {
	case fnErr != nil:
		return fnErr
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("snapshot %s: read %s: %w", m.ID, f.Name, ctx.Err())
	case err != nil:
		// A damaged file is the likelier cause, and its checksum tells.
		if cerr := checksum(); cerr != nil {
			return fmt.Errorf("%w; reading it failed after %d records: %v", cerr, n, err)
		}
		var ce *CorruptError
		if errors.As(err, &ce) {
			return err
		}
		return corrupt("after %d records: %v", n, err)
	}
	if err := checksum(); err != nil {
		return err
	}
	if jobs != f.Jobs {
		return corrupt("%d jobs, the manifest says %d", jobs, f.Jobs)
	}
	if workflows != f.Workflows {
		return corrupt("%d workflows, the manifest says %d", workflows, f.Workflows)
	}
	return nil
}

// decode decompresses a shard file and calls fn with each record, stopping at fn's first
// error. A decompression or JSON error is returned wrapped; fn's errors as they are.
func decode(r io.Reader, fn func(record) error) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("decompress: %w", err)
	}
	dec := json.NewDecoder(zr)
	for {
		var rec record
		err := dec.Decode(&rec)
		if err == io.EOF {
			return zr.Close()
		}
		if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}

// hashReader hashes and counts what is read through it.
type hashReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}
