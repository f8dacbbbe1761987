package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"gocloud.dev/blob"

	"github.com/tockhq/tock/shard"
)

// ExportOptions tunes Export. The zero value is usable.
type ExportOptions struct {
	// Parallel is how many shards are exported at once, each with one file being
	// written. Default 4.
	Parallel int
	// TempDir is where Export spools the job ids it lists before it writes the shard
	// files, in a directory of its own that it removes before it returns: about the
	// length of the ids plus one byte per job (some 40 MB for a million ids of 36
	// bytes). Default os.TempDir().
	TempDir string
}

// Export writes a snapshot of the store's namespace to b and returns its manifest: one
// gzip-compressed file of JSON lines per shard, one line per job, then the manifest. It
// does not block Redis: it lists the jobs and workflows of every shard with one SCAN per
// primary (shard.Store.ScanJobsAndWorkflows, which visits each key once), spools their
// ids per shard in files under opts.TempDir, then writes the shard files, opts.Parallel
// at a time, reading the jobs a few hundred at a time, each job in one atomic step, and
// each workflow with its nodes' jobs in one atomic step (so they agree). The snapshot is
// therefore consistent per job and per workflow, not across them: they are read over the
// time the export takes (between the manifest's Started and Finished), so a job created
// meanwhile may be missing, and one removed meanwhile may be present.
//
// When Export fails it deletes what it wrote (best effort); a snapshot without a
// manifest is incomplete in any case, and Restore refuses it.
func Export(ctx context.Context, st *shard.Store, b *blob.Bucket, opts ExportOptions) (*Manifest, error) {
	if opts.Parallel == 0 {
		opts.Parallel = 4
	}
	if opts.Parallel < 1 {
		return nil, fmt.Errorf("export snapshot: parallel must be at least 1, got %d", opts.Parallel)
	}
	cfg := st.Config()
	started, err := st.ServerNow(ctx)
	if err != nil {
		return nil, fmt.Errorf("export snapshot: %w", err)
	}
	m := &Manifest{
		Format: FormatVersion, Schema: shard.SchemaVersion, ID: newID(cfg.Namespace, started),
		Namespace: cfg.Namespace, Started: started.UTC().Truncate(time.Millisecond),
		Shards: cfg.Shards, BucketMs: cfg.BucketSize.Milliseconds(),
		PausedQueues: []string{}, Files: make([]File, cfg.Shards),
	}
	if _, err := b.List(&blob.ListOptions{Prefix: m.ID + "/"}).Next(ctx); err != io.EOF {
		if err == nil {
			err = errors.New("it exists already")
		}
		return nil, fmt.Errorf("export snapshot %s: %w", m.ID, err)
	}
	paused, err := st.PausedQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("export snapshot %s: %w", m.ID, err)
	}
	for q := range paused {
		m.PausedQueues = append(m.PausedQueues, q)
	}
	sort.Strings(m.PausedQueues)

	sp, err := newSpool(opts.TempDir, m.Shards)
	if err != nil {
		return nil, fmt.Errorf("export snapshot %s: %w", m.ID, err)
	}
	defer sp.close() // best effort: the ids are of no use once the files are written
	err = st.ScanJobsAndWorkflows(ctx, func(id shard.ID, jobIDs, wfIDs []string) error {
		if err := sp.add(id, jobIDs); err != nil {
			return err
		}
		// Marked by a leading '@', which no id has.
		marked := make([]string, len(wfIDs))
		for i, w := range wfIDs {
			marked[i] = workflowMark + w
		}
		return sp.add(id, marked)
	})
	if err == nil {
		err = sp.flush()
	}
	if err == nil {
		err = each(ctx, m.Shards, opts.Parallel, func(ctx context.Context, i int) error {
			f, err := exportShard(ctx, st, b, sp, m.ID, shard.ID(i))
			m.Files[i] = f // each call writes its own entry
			return err
		})
	}
	if err != nil {
		// Best effort, also when ctx ended: what was written is of no use.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := Delete(cctx, b, m.ID); derr != nil {
			err = errors.Join(err, derr)
		}
		return nil, fmt.Errorf("export snapshot %s: %w", m.ID, err)
	}
	for _, f := range m.Files {
		m.Jobs += f.Jobs
		m.Workflows += f.Workflows
		m.Bytes += f.Bytes
	}
	finished, err := st.ServerNow(ctx)
	if err != nil {
		return nil, fmt.Errorf("export snapshot %s: %w", m.ID, err)
	}
	m.Finished = finished.UTC().Truncate(time.Millisecond)
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("export snapshot %s: %w", m.ID, err)
	}
	if err := b.WriteAll(ctx, m.ID+"/"+manifestName, append(raw, '\n'), &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return nil, fmt.Errorf("export snapshot %s: write %s: %w", m.ID, manifestName, err)
	}
	return m, nil
}

// workflowMark marks the workflow ids among a spool's ids.
const workflowMark = "@"

// exportShard writes the file of shard id into snapshot snapID: the jobs whose ids sp
// holds for the shard.
func exportShard(ctx context.Context, st *shard.Store, b *blob.Bucket, sp *spool, snapID string, id shard.ID) (File, error) {
	f := File{Shard: int(id), Name: fileName(int(id))}
	// Cancelling the writer's context before Close aborts the write: nothing is stored.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.NewWriter(wctx, snapID+"/"+f.Name, &blob.WriterOptions{ContentType: "application/gzip"})
	if err != nil {
		return File{}, fmt.Errorf("write %s: %w", f.Name, err)
	}
	sum := sha256.New()
	counted := &countWriter{w: io.MultiWriter(w, sum)}
	gz := gzip.NewWriter(counted)
	enc := json.NewEncoder(gz)
	enc.SetEscapeHTML(false)
	err = sp.read(id, readIDs, func(ids []string) error {
		var jobIDs, wfIDs []string
		for _, i := range ids {
			if w, ok := strings.CutPrefix(i, workflowMark); ok {
				wfIDs = append(wfIDs, w)
			} else {
				jobIDs = append(jobIDs, i)
			}
		}
		jobs, err := st.ReadJobsButNodes(ctx, id, jobIDs)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if err := enc.Encode(newRecord(j)); err != nil {
				return fmt.Errorf("encode job %q: %w", j.ID, err)
			}
		}
		f.Jobs += int64(len(jobs))
		if len(wfIDs) == 0 {
			return nil
		}
		wfs, err := st.ReadWorkflows(ctx, id, wfIDs)
		if err != nil {
			return err
		}
		for _, w := range wfs {
			if err := enc.Encode(newWorkflowRecord(w)); err != nil {
				return fmt.Errorf("encode workflow %q: %w", w.ID, err)
			}
			f.Jobs += int64(len(w.Nodes))
		}
		f.Workflows += int64(len(wfs))
		return nil
	})
	if err == nil {
		err = gz.Close()
	}
	if err != nil {
		cancel()
		_ = w.Close() // reports the cancellation
		return File{}, fmt.Errorf("write %s: %w", f.Name, err)
	}
	if err := w.Close(); err != nil {
		return File{}, fmt.Errorf("write %s: %w", f.Name, err)
	}
	sp.remove(id)
	f.Bytes, f.SHA256 = counted.n, hex.EncodeToString(sum.Sum(nil))
	return f, nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
