package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// URLs and plain paths
	_ "gocloud.dev/blob/s3blob"   // s3:// URLs (AWS S3, MinIO and other S3-compatible stores)
	"gocloud.dev/gcerrors"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// FormatVersion is the version of the snapshot format (manifest and shard files) that
// this package writes. Format 2 added workflow records (a workflow with its nodes' jobs)
// and the manifest's workflow counts.
const FormatVersion = 2

// OldestFormat is the oldest snapshot format this package reads: format 1 holds jobs
// only (a workflow's node jobs are there, as jobs, but not the workflow). A snapshot of
// another format is refused.
const OldestFormat = 1

// manifestName is the manifest's file name inside a snapshot's folder.
const manifestName = "manifest.json"

// idTime is the layout of the time part of a snapshot id (UTC, sortable as text).
const idTime = "20060102T150405.000Z"

// Errors returned by this package. Callers compare with errors.Is.
var (
	// ErrNotFound: the bucket holds no such snapshot (or no complete snapshot of the
	// namespace asked for).
	ErrNotFound = errors.New("no such snapshot")
	// ErrIncomplete: the snapshot has files but no manifest: its export failed, or is
	// still running. The manifest is written last.
	ErrIncomplete = errors.New("snapshot is incomplete: it has no manifest (its export failed or is still running)")
)

// CorruptError reports a snapshot whose manifest or files are damaged, missing or
// inconsistent. Restore refuses such a snapshot before writing anything.
type CorruptError struct {
	ID   string // the snapshot
	File string // the file at fault: manifest.json or a shard file
	Msg  string // what is wrong
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("snapshot %s is damaged: %s: %s", e.ID, e.File, e.Msg)
}

// Manifest describes a complete snapshot. It is stored as manifest.json in the snapshot's
// folder, written after every shard file.
type Manifest struct {
	// Format is the snapshot format, FormatVersion when written by this package
	// (OldestFormat to FormatVersion are read).
	Format int `json:"format"`
	// Schema is the data layout version of the namespace the jobs were exported from
	// (shard.SchemaVersion); shard.OldestSnapshotSchema is the oldest one restored.
	Schema int `json:"schema"`
	// ID names the snapshot: "<namespace>/<UTC start time>", e.g.
	// "tock/20260102T150405.123Z"; it is also the snapshot's folder in the bucket.
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	// Started and Finished bound the export, on the Redis clock. Each job was read at one
	// moment in between.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Shards is the namespace's shard count: there is one file per shard.
	Shards int `json:"shards"`
	// BucketMs is the namespace's due bucket width, ms.
	BucketMs int64 `json:"bucket_ms"`
	// PausedQueues are the queues that were paused.
	PausedQueues []string `json:"paused_queues"`
	// Jobs, Workflows and Bytes total the files'.
	Jobs      int64  `json:"jobs"`
	Workflows int64  `json:"workflows,omitempty"`
	Bytes     int64  `json:"bytes"`
	Files     []File `json:"files"`
}

// File describes one shard file of a snapshot.
type File struct {
	Shard int    `json:"shard"`
	Name  string `json:"name"` // within the snapshot's folder: shard-0007.ndjson.gz
	Jobs  int64  `json:"jobs"` // jobs in the file: job records, and workflows' nodes
	// Workflows is how many workflow records (lines) the file holds (format 2).
	Workflows int64  `json:"workflows,omitempty"`
	Bytes     int64  `json:"bytes"`  // size of the file as stored (compressed)
	SHA256    string `json:"sha256"` // of the file as stored, hex
}

// fileName is the name of shard id's file.
func fileName(id int) string { return fmt.Sprintf("shard-%04d.ndjson.gz", id) }

// newID returns the id of a snapshot of namespace ns started at t.
func newID(ns string, t time.Time) string { return ns + "/" + t.UTC().Format(idTime) }

// splitID splits a snapshot id into namespace and start time.
func splitID(id string) (ns string, t time.Time, ok bool) {
	ns, ts, found := strings.Cut(id, "/")
	if !found || job.ValidateID("namespace", ns, 32) != nil {
		return "", time.Time{}, false
	}
	t, err := time.Parse(idTime, ts)
	return ns, t, err == nil
}

// OpenBucket opens the bucket that snapshots are written to and read from, given as a URL
// (gocloud.dev/blob): file:///a/directory for a local directory, s3://bucket?region=...
// for S3 or an S3-compatible store, with the query parameters of gocloud.dev/blob/s3blob
// (endpoint=http://127.0.0.1:9000&use_path_style=true for MinIO; credentials from the
// usual AWS environment variables and files). A path without a scheme means a local
// directory. For local directories the directory is created when missing (see
// OpenExistingBucket for reading) and no attribute sidecar files are written, unless the
// URL says otherwise (create_dir, metadata). Any URL may add prefix=some/folder/ to keep
// snapshots under a folder. The caller closes the bucket.
func OpenBucket(ctx context.Context, location string) (*blob.Bucket, error) {
	return openBucket(ctx, location, true)
}

// OpenExistingBucket opens a location to read snapshots from, as OpenBucket does, but
// never creates a local directory: one that does not exist is an error that wraps
// ErrNotFound and names it. Listing, verifying and restoring use it, so that a mistyped
// location is reported rather than created empty. The caller closes the bucket.
func OpenExistingBucket(ctx context.Context, location string) (*blob.Bucket, error) {
	return openBucket(ctx, location, false)
}

func openBucket(ctx context.Context, location string, create bool) (*blob.Bucket, error) {
	if location == "" {
		return nil, errors.New("snapshot location: empty: want a directory, file:///dir or s3://bucket")
	}
	u, err := url.Parse(location)
	if err != nil || len(u.Scheme) <= 1 { // a path (a one-letter scheme is a Windows drive)
		abs, err := filepath.Abs(location)
		if err != nil {
			return nil, fmt.Errorf("snapshot location %q: %w", location, err)
		}
		u = &url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}
	}
	if u.Scheme == "file" {
		q := u.Query()
		if !create {
			dir := filepath.FromSlash(u.Path)
			fi, err := os.Stat(dir)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil, fmt.Errorf("snapshot location %q: directory %s does not exist: %w", location, dir, ErrNotFound)
			case err != nil:
				return nil, fmt.Errorf("snapshot location %q: %w", location, err)
			case !fi.IsDir():
				return nil, fmt.Errorf("snapshot location %q: %s is not a directory", location, dir)
			}
			q.Del("create_dir")
		} else if !q.Has("create_dir") {
			q.Set("create_dir", "true")
		}
		if !q.Has("metadata") {
			q.Set("metadata", "skip")
		}
		u.RawQuery = q.Encode()
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("snapshot location %q: %w", location, err)
	}
	return b, nil
}

// Info is a snapshot found in a bucket.
type Info struct {
	ID        string
	Namespace string
	Time      time.Time // when its export started
	// Manifest is nil when the snapshot is incomplete (no manifest) or its manifest is
	// damaged (Err says how).
	Manifest *Manifest
	Err      error
}

// Complete reports whether the snapshot has a valid manifest.
func (i Info) Complete() bool { return i.Manifest != nil }

// List returns the snapshots in b of namespace ns ("" for every namespace), newest first
// (by the time their export started), with their manifests read.
func List(ctx context.Context, b *blob.Bucket, ns string) ([]Info, error) {
	var namespaces []string
	if ns != "" {
		namespaces = []string{ns}
	} else {
		dirs, err := listDirs(ctx, b, "")
		if err != nil {
			return nil, err
		}
		namespaces = dirs
	}
	var out []Info
	for _, n := range namespaces {
		dirs, err := listDirs(ctx, b, n+"/")
		if err != nil {
			return nil, err
		}
		for _, d := range dirs {
			id := n + "/" + d
			ns, t, ok := splitID(id)
			if !ok {
				continue // not a snapshot's folder
			}
			info := Info{ID: id, Namespace: ns, Time: t}
			info.Manifest, info.Err = ReadManifest(ctx, b, id)
			if errors.Is(info.Err, ErrNotFound) {
				info.Err = ErrIncomplete
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(a, c int) bool {
		if !out[a].Time.Equal(out[c].Time) {
			return out[a].Time.After(out[c].Time)
		}
		return out[a].ID < out[c].ID
	})
	return out, nil
}

// listDirs lists the folder names directly under prefix.
func listDirs(ctx context.Context, b *blob.Bucket, prefix string) ([]string, error) {
	var dirs []string
	it := b.List(&blob.ListOptions{Prefix: prefix, Delimiter: "/"})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return dirs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list snapshots under %q: %w", prefix, err)
		}
		if obj.IsDir {
			dirs = append(dirs, strings.TrimSuffix(strings.TrimPrefix(obj.Key, prefix), "/"))
		}
	}
}

// Resolve turns a reference to a snapshot into its id: "" means the newest complete
// snapshot of namespace ns; "<namespace>/<time>" is an id; "<time>" (as in an id) names
// a snapshot of ns; any other name is a namespace whose newest complete snapshot is meant.
// ErrNotFound when there is none.
func Resolve(ctx context.Context, b *blob.Bucket, ref, ns string) (string, error) {
	switch {
	case strings.Contains(ref, "/"):
		return ref, nil
	case ref == "":
	default:
		if _, err := time.Parse(idTime, ref); err == nil {
			return ns + "/" + ref, nil
		}
		ns = ref
	}
	infos, err := List(ctx, b, ns)
	if err != nil {
		return "", err
	}
	for _, i := range infos {
		if i.Complete() {
			return i.ID, nil
		}
	}
	return "", fmt.Errorf("namespace %q: %w: no complete snapshot (found %d incomplete or damaged)", ns, ErrNotFound, len(infos))
}

// ReadManifest reads and checks the manifest of snapshot id. ErrNotFound when there is no
// manifest (ErrIncomplete when there are files without one), a *CorruptError when it is
// damaged or describes an impossible snapshot.
func ReadManifest(ctx context.Context, b *blob.Bucket, id string) (*Manifest, error) {
	if _, _, ok := splitID(id); !ok {
		return nil, fmt.Errorf("snapshot %q: %w: an id is <namespace>/<time>, like tock/20260102T150405.123Z", id, ErrNotFound)
	}
	raw, err := b.ReadAll(ctx, id+"/"+manifestName)
	if gcerrors.Code(err) == gcerrors.NotFound {
		if files, lerr := b.List(&blob.ListOptions{Prefix: id + "/"}).Next(ctx); lerr == nil && files != nil {
			return nil, fmt.Errorf("snapshot %s: %w", id, ErrIncomplete)
		}
		return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: read %s: %w", id, manifestName, err)
	}
	m := &Manifest{}
	if err := json.Unmarshal(raw, m); err != nil {
		return nil, &CorruptError{ID: id, File: manifestName, Msg: "not valid JSON: " + err.Error()}
	}
	if err := m.check(id); err != nil {
		return nil, &CorruptError{ID: id, File: manifestName, Msg: err.Error()}
	}
	return m, nil
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// check reports what makes m an impossible manifest of snapshot id.
func (m *Manifest) check(id string) error {
	switch {
	case m.Format < OldestFormat || m.Format > FormatVersion:
		return fmt.Errorf("format %d, this tock reads formats %d to %d", m.Format, OldestFormat, FormatVersion)
	case m.Schema < shard.OldestSnapshotSchema || m.Schema > shard.SchemaVersion:
		return fmt.Errorf("data schema v%d, this tock restores v%d to v%d", m.Schema, shard.OldestSnapshotSchema, shard.SchemaVersion)
	case m.ID != id:
		return fmt.Errorf("names snapshot %q", m.ID)
	case !strings.HasPrefix(id, m.Namespace+"/"):
		return fmt.Errorf("names namespace %q", m.Namespace)
	case m.Shards < 1 || m.Shards > shard.MaxShards:
		return fmt.Errorf("shard count %d out of range", m.Shards)
	case m.BucketMs < 1000:
		return fmt.Errorf("bucket width %d ms out of range", m.BucketMs)
	case len(m.Files) != m.Shards:
		return fmt.Errorf("lists %d files for %d shards", len(m.Files), m.Shards)
	}
	for _, q := range m.PausedQueues {
		if err := job.ValidateID("paused queue", q, job.MaxQueueLen); err != nil {
			return err
		}
	}
	var jobs, workflows, bytes int64
	for i, f := range m.Files {
		switch {
		case f.Shard != i:
			return fmt.Errorf("file %d is for shard %d, want %d", i, f.Shard, i)
		case f.Name != fileName(i):
			return fmt.Errorf("shard %d: file name %q, want %q", i, f.Name, fileName(i))
		case f.Jobs < 0 || f.Bytes < 0 || f.Workflows < 0:
			return fmt.Errorf("%s: negative count", f.Name)
		case f.Workflows > 0 && m.Format < 2:
			return fmt.Errorf("%s: %d workflows in a snapshot of format %d", f.Name, f.Workflows, m.Format)
		case !sha256RE.MatchString(f.SHA256):
			return fmt.Errorf("%s: %q is not a hex SHA-256", f.Name, f.SHA256)
		}
		jobs += f.Jobs
		workflows += f.Workflows
		bytes += f.Bytes
	}
	if jobs != m.Jobs || bytes != m.Bytes {
		return fmt.Errorf("totals %d jobs and %d bytes, its files %d and %d", m.Jobs, m.Bytes, jobs, bytes)
	}
	if workflows != m.Workflows {
		return fmt.Errorf("totals %d workflows, its files %d", m.Workflows, workflows)
	}
	return nil
}

// Delete removes snapshot id from b: its manifest first (so that a deletion cut short
// leaves an incomplete snapshot, never a complete-looking damaged one), then its files.
func Delete(ctx context.Context, b *blob.Bucket, id string) error {
	if _, _, ok := splitID(id); !ok {
		return fmt.Errorf("delete snapshot %q: %w", id, ErrNotFound)
	}
	if err := b.Delete(ctx, id+"/"+manifestName); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	it := b.List(&blob.ListOptions{Prefix: id + "/"})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete snapshot %s: list: %w", id, err)
		}
		if err := b.Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("delete snapshot %s: %w", id, err)
		}
	}
}

// IncompleteGrace is how long after its start Prune leaves an incomplete snapshot alone:
// its export may still be running, also when it is older than the newest complete
// snapshot (another server's export that outlasted its period, a manual export).
const IncompleteGrace = 24 * time.Hour

// Prune deletes the snapshots of namespace ns older than its newest keep complete ones
// and returns their ids: the complete ones, and the incomplete ones (or damaged) that
// started more than IncompleteGrace ago. Newer snapshots, and incomplete ones that
// started within IncompleteGrace, are left alone (an export may be writing them). keep
// must be at least 1.
func Prune(ctx context.Context, b *blob.Bucket, ns string, keep int) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("prune snapshots: keep must be at least 1, got %d", keep)
	}
	infos, err := List(ctx, b, ns)
	if err != nil {
		return nil, fmt.Errorf("prune snapshots: %w", err)
	}
	complete := 0
	var deleted []string
	for _, i := range infos {
		if complete < keep {
			if i.Complete() {
				complete++
			}
			continue
		}
		if !i.Complete() && time.Since(i.Time) < IncompleteGrace {
			continue
		}
		if err := Delete(ctx, b, i.ID); err != nil {
			return deleted, fmt.Errorf("prune snapshots: %w", err)
		}
		deleted = append(deleted, i.ID)
	}
	return deleted, nil
}
