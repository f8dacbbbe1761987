package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/rueidis"
	"gocloud.dev/blob"

	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
)

const snapshotUsage = `Usage:
  tock snapshot export --to LOCATION [--keep N] [--parallel 4] [--json]
      Write a snapshot of the namespace: a compressed file per shard, then a manifest.
      --keep N then deletes all but the newest N complete snapshots of the namespace.
  tock snapshot restore --from LOCATION [--snapshot ID] [--shards N] [--bucket 1m] [--json]
      Check a snapshot whole, then rebuild the namespace from it. The namespace must hold
      no jobs (a restore of the same snapshot that was interrupted is completed). A new
      namespace gets the snapshot's shard count and bucket width unless --shards or
      --bucket say otherwise; an existing one keeps its own (jobs move to their shards).
  tock snapshot verify --from LOCATION [--snapshot ID] [--json]
      Read a snapshot whole and check every file, without restoring it.
  tock snapshot ls --from LOCATION [--namespace NS | --all] [--json]
      List the snapshots of the namespace, newest first; without a namespace setting
      (or with --all), those of every namespace.

LOCATION is a directory, file:///dir, or s3://bucket?region=... (a gocloud.dev/blob URL:
add endpoint=http://host:9000&use_path_style=true for MinIO, prefix=folder/ for a
folder; AWS credentials come from the usual environment variables). ID is
<namespace>/<time> as ls prints it, or <time> for a snapshot of --namespace, or a
namespace for its newest complete snapshot; default the newest complete snapshot of
--namespace.

Their settings come from flags, environment variables or the --config file as for tock
server (see docs/config.md): --to and --from are the snapshot_to setting (TOCK_SNAPSHOT_TO),
export and restore connect to Redis with --redis (TOCK_REDIS), --redis-username and
--redis-password, and --namespace (TOCK_NAMESPACE, default tock) names the namespace to
export, to restore into, or to list.

Run 'tock snapshot <command> --help' for the flags of a command.
`

// snapshotCommands maps the words after tock snapshot to their commands.
var snapshotCommands = map[string]command{
	"export": cmdSnapshotExport, "restore": cmdSnapshotRestore, "verify": cmdSnapshotVerify,
	"ls": cmdSnapshotLs, "list": cmdSnapshotLs,
}

// snapshotCmd is one tock snapshot command being run.
type snapshotCmd struct {
	*cli
	cfg      *config
	ns       string // the namespace; "" for ls --all
	asJSON   bool
	parallel int
}

// runSnapshot runs tock snapshot export|restore|verify|ls.
func runSnapshot(ctx context.Context, args []string, c *cli) error {
	switch {
	case len(args) == 0:
		return &usageError{cmd: "tock snapshot", err: errors.New("snapshot: a command is required"), usage: snapshotUsage}
	case isHelp(args[0]):
		fmt.Fprint(c.out, snapshotUsage)
		return flag.ErrHelp
	}
	cmd, ok := snapshotCommands[args[0]]
	if !ok {
		return usageErrorf("tock snapshot", "snapshot: unknown command %q (want export, restore, verify or ls)", args[0])
	}
	s := &snapshotCmd{cli: c}
	var (
		keep int
		ref  string
		all  bool
	)
	cfg, err := loadConfig(cmd, args[1:], c.getenv, c.out, func(fs *flag.FlagSet) {
		fs.BoolVar(&s.asJSON, "json", false, "print JSON instead of text")
		fs.IntVar(&s.parallel, "parallel", 4, "`N` shard files written or read at once")
		switch cmd {
		case cmdSnapshotExport:
			fs.IntVar(&keep, "keep", 0, "after the export, keep only the newest `N` complete snapshots of the namespace (0: delete none)")
		case cmdSnapshotRestore:
			fs.StringVar(&ref, "snapshot", "", "the `ID` of the snapshot to restore (default: the newest complete one of --namespace)")
		case cmdSnapshotVerify:
			fs.StringVar(&ref, "snapshot", "", "the `ID` of the snapshot to check (default: the newest complete one of --namespace)")
		case cmdSnapshotLs:
			fs.BoolVar(&all, "all", false, "list the snapshots of every namespace")
		}
	})
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case err != nil:
		return fmt.Errorf("%s: %w", cmd, err)
	case s.parallel < 1:
		return usageErrorf("tock "+cmd.String(), "%s: --parallel must be at least 1, got %d", cmd, s.parallel)
	case keep < 0:
		return usageErrorf("tock "+cmd.String(), "%s: --keep must not be negative, got %d", cmd, keep)
	}
	s.cfg, s.ns = cfg, cfg.namespace
	switch cmd {
	case cmdSnapshotExport:
		return s.export(ctx, keep)
	case cmdSnapshotRestore:
		return s.restore(ctx, ref)
	case cmdSnapshotVerify:
		return s.verify(ctx, ref)
	}
	// Without a namespace setting, ls lists every namespace's snapshots: the user may
	// have exported another namespace than the default one.
	if all || !cfg.given("namespace") {
		s.ns = ""
	}
	return s.list(ctx)
}

// errorf returns an error of the command: "snapshot export: ...".
func (s *snapshotCmd) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", s.cfg.cmd, fmt.Errorf(format, args...))
}

// bucket opens the snapshot location to write to; a missing directory is created.
func (s *snapshotCmd) bucket(ctx context.Context) (*blob.Bucket, error) {
	b, err := snapshot.OpenBucket(ctx, s.cfg.snapshotTo)
	if err != nil {
		return nil, s.errorf("%w", err)
	}
	return b, nil
}

// existingBucket opens the snapshot location to read from; a missing directory is an
// error, and is not created.
func (s *snapshotCmd) existingBucket(ctx context.Context) (*blob.Bucket, error) {
	b, err := snapshot.OpenExistingBucket(ctx, s.cfg.snapshotTo)
	if err != nil {
		return nil, s.errorf("%w", err)
	}
	return b, nil
}

// otherNamespaces says which namespaces other than s.ns have snapshots in b, for a
// message about finding none of s.ns: "" when there are none.
func (s *snapshotCmd) otherNamespaces(ctx context.Context, b *blob.Bucket) string {
	infos, err := snapshot.List(ctx, b, "")
	if err != nil {
		return ""
	}
	var names []string
	for _, in := range infos {
		if in.Namespace != s.ns && !slices.Contains(names, in.Namespace) {
			names = append(names, in.Namespace)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return fmt.Sprintf("the location holds snapshots of namespace %s (--namespace NAME chooses one, ls --all lists them all)",
		strings.Join(names, ", "))
}

// connect connects to Redis.
func (s *snapshotCmd) connect() (rueidis.Client, error) {
	rc, err := s.cfg.connect()
	if err != nil {
		return nil, s.errorf("%w", err)
	}
	return rc, nil
}

func (s *snapshotCmd) export(ctx context.Context, keep int) error {
	rc, err := s.connect()
	if err != nil {
		return err
	}
	defer rc.Close()
	shards, bucketWidth, ok, err := shard.NamespaceSettings(ctx, rc, s.ns)
	if err != nil {
		return s.errorf("%w", err)
	}
	if !ok {
		return s.errorf("namespace %q does not exist in Redis at %s: nothing to export", s.ns, strings.Join(s.cfg.redis, ","))
	}
	st, err := shard.Open(ctx, rc, shard.Config{Namespace: s.ns, Shards: shards, BucketSize: bucketWidth})
	if err != nil {
		return s.errorf("%w", err)
	}
	b, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	m, err := snapshot.Export(ctx, st, b, snapshot.ExportOptions{Parallel: s.parallel})
	if err != nil {
		return s.errorf("%w", err)
	}
	var pruned []string
	if keep > 0 {
		if pruned, err = snapshot.Prune(ctx, b, s.ns, keep); err != nil {
			return s.errorf("snapshot %s written, but: %w", m.ID, err)
		}
	}
	if s.asJSON {
		return s.printJSON(struct {
			*snapshot.Manifest
			Pruned []string `json:"pruned"`
		}{m, append([]string{}, pruned...)})
	}
	fmt.Fprintf(s.out, "snapshot %s: %d jobs%s in %d files, %s, in %s\n", m.ID, m.Jobs, workflowsOf(m.Workflows), len(m.Files),
		byteSize(m.Bytes), m.Finished.Sub(m.Started).Round(time.Millisecond))
	for _, id := range pruned {
		fmt.Fprintf(s.out, "deleted %s\n", id)
	}
	return nil
}

// verified opens the location, finds the snapshot ref names and reads it whole to check
// it. The caller closes the bucket.
func (s *snapshotCmd) verified(ctx context.Context, ref string) (*blob.Bucket, *snapshot.Manifest, error) {
	b, err := s.existingBucket(ctx)
	if err != nil {
		return nil, nil, err
	}
	id, err := snapshot.Resolve(ctx, b, ref, s.ns)
	if err == nil {
		var m *snapshot.Manifest
		if m, err = snapshot.Verify(ctx, b, id, snapshot.ReadOptions{Parallel: s.parallel}); err == nil {
			return b, m, nil
		}
	} else if ref == "" && errors.Is(err, snapshot.ErrNotFound) {
		if others := s.otherNamespaces(ctx, b); others != "" {
			err = fmt.Errorf("%w; %s", err, others)
		}
	}
	_ = b.Close()
	return nil, nil, s.errorf("%w", err)
}

func (s *snapshotCmd) restore(ctx context.Context, ref string) error {
	// Verified before the namespace is opened (which initialises a new one).
	b, m, err := s.verified(ctx, ref)
	if err != nil {
		return err
	}
	defer b.Close()
	rc, err := s.connect()
	if err != nil {
		return err
	}
	defer rc.Close()
	cfg := shard.Config{Namespace: s.ns, Shards: m.Shards, BucketSize: time.Duration(m.BucketMs) * time.Millisecond}
	have, haveBucket, exists, err := shard.NamespaceSettings(ctx, rc, s.ns)
	if err != nil {
		return s.errorf("%w", err)
	}
	if exists {
		// An existing namespace keeps its settings: one given that differs is refused.
		var errs []error
		if s.cfg.given("shards") && s.cfg.shards != have {
			errs = append(errs, s.cfg.errorf("shards", "namespace %q exists with %d shards, and its shard count cannot change "+
				"(leave the setting out to restore into the namespace as it is, or restore into another --namespace)", s.ns, have))
		}
		if s.cfg.given("bucket") && s.cfg.bucket != haveBucket {
			errs = append(errs, s.cfg.errorf("bucket", "namespace %q exists with %s buckets, and its bucket width cannot change "+
				"(leave the setting out to restore into the namespace as it is, or restore into another --namespace)", s.ns, shortDuration(haveBucket)))
		}
		if err := errors.Join(errs...); err != nil {
			return s.errorf("%w", err)
		}
		cfg.Shards, cfg.BucketSize = have, haveBucket
	} else {
		if s.cfg.given("shards") {
			cfg.Shards = s.cfg.shards
		}
		if s.cfg.given("bucket") {
			cfg.BucketSize = s.cfg.bucket
		}
	}
	st, err := shard.Open(ctx, rc, cfg)
	if err != nil {
		return s.errorf("%w", err)
	}
	res, err := snapshot.RestoreVerified(ctx, st, b, m, snapshot.ReadOptions{Parallel: s.parallel})
	if err != nil {
		if res != nil && res.Restored > 0 {
			err = fmt.Errorf("%w (%d jobs were restored; run the same command again to complete the restore)", err, res.Restored)
		}
		return s.errorf("%w", err)
	}
	if s.asJSON {
		return s.printJSON(struct {
			ID        string `json:"id"`
			Namespace string `json:"namespace"`
			Shards    int    `json:"shards"`
			Resumed   bool   `json:"resumed"`
			Restored  int    `json:"restored"`
			Existed   int    `json:"existed"`
			Expired   int    `json:"expired"`
			Workflows int    `json:"workflows"`
			WfExisted int    `json:"workflows_existed"`
			WfExpired int    `json:"workflows_expired"`
		}{m.ID, s.ns, cfg.Shards, res.Resumed, res.Restored, res.Existed, res.Expired, res.Workflows, res.WorkflowsExisted, res.WorkflowsExpired})
	}
	if res.Resumed {
		fmt.Fprintf(s.out, "completing an interrupted restore of %s\n", m.ID)
	}
	fmt.Fprintf(s.out, "restored %d jobs%s from %s into namespace %q (%d shards)", res.Restored, workflowsOf(int64(res.Workflows)), m.ID, s.ns, cfg.Shards)
	if res.Existed > 0 || res.Expired > 0 {
		fmt.Fprintf(s.out, "; %d were there already, %d had expired", res.Existed, res.Expired)
	}
	if res.WorkflowsExisted > 0 || res.WorkflowsExpired > 0 {
		fmt.Fprintf(s.out, "; %d workflows were there already, %d had expired", res.WorkflowsExisted, res.WorkflowsExpired)
	}
	fmt.Fprintln(s.out)
	return nil
}

func (s *snapshotCmd) verify(ctx context.Context, ref string) error {
	b, m, err := s.verified(ctx, ref)
	if err != nil {
		return err
	}
	defer b.Close()
	if s.asJSON {
		return s.printJSON(m)
	}
	fmt.Fprintf(s.out, "snapshot %s is intact: %d jobs%s in %d files, %s\n", m.ID, m.Jobs, workflowsOf(m.Workflows), len(m.Files), byteSize(m.Bytes))
	return nil
}

// workflowsOf says how many workflows a count of jobs includes the nodes of ("" none).
func workflowsOf(n int64) string {
	switch n {
	case 0:
		return ""
	case 1:
		return " (with the nodes of 1 workflow)"
	}
	return fmt.Sprintf(" (with the nodes of %d workflows)", n)
}

func (s *snapshotCmd) list(ctx context.Context) error {
	b, err := s.existingBucket(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	infos, err := snapshot.List(ctx, b, s.ns)
	if err != nil {
		return s.errorf("%w", err)
	}
	if len(infos) == 0 && s.ns != "" && !s.asJSON {
		fmt.Fprintf(s.errOut, "no snapshots of namespace %q", s.ns)
		if others := s.otherNamespaces(ctx, b); others != "" {
			fmt.Fprintf(s.errOut, "; %s", others)
		}
		fmt.Fprintln(s.errOut)
		return nil
	}
	if s.asJSON {
		type entry struct {
			ID       string             `json:"id"`
			Complete bool               `json:"complete"`
			Error    string             `json:"error,omitempty"`
			Manifest *snapshot.Manifest `json:"manifest,omitempty"`
		}
		out := make([]entry, len(infos))
		for i, in := range infos {
			out[i] = entry{ID: in.ID, Complete: in.Complete(), Manifest: in.Manifest}
			if in.Err != nil {
				out[i].Error = in.Err.Error()
			}
		}
		return s.printJSON(out)
	}
	if len(infos) == 0 {
		fmt.Fprintln(s.errOut, "no snapshots")
		return nil
	}
	w := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
	// JOBS counts the workflows' nodes too (as export and verify say), WORKFLOWS the
	// workflows those are the nodes of.
	fmt.Fprintln(w, "ID\tSTARTED\tJOBS\tWORKFLOWS\tSHARDS\tSIZE\tSTATUS")
	for _, in := range infos {
		started := in.Time.In(s.location()).Format(time.DateTime)
		if m := in.Manifest; m != nil {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\tcomplete\n", in.ID, started, m.Jobs, m.Workflows, m.Shards, byteSize(m.Bytes))
			continue
		}
		status := "incomplete"
		var ce *snapshot.CorruptError
		if errors.As(in.Err, &ce) {
			status = "damaged: " + ce.Msg
		} else if !errors.Is(in.Err, snapshot.ErrIncomplete) {
			status = "unreadable: " + in.Err.Error()
		}
		fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t-\t%s\n", in.ID, started, status)
	}
	return w.Flush()
}

func (s *snapshotCmd) printJSON(v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = s.out.Write(append(raw, '\n'))
	return err
}

// byteSize formats n bytes for people: 812 B, 1.5 KiB, 3.2 MiB.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
