package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
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
  tock snapshot ls --from LOCATION [--all] [--json]
      List the snapshots of the namespace (--all: of every namespace), newest first.

LOCATION is a directory, file:///dir, or s3://bucket?region=... (a gocloud.dev/blob URL:
add endpoint=http://host:9000&use_path_style=true for MinIO, prefix=folder/ for a
folder; AWS credentials come from the usual environment variables); default
TOCK_SNAPSHOT_TO. ID is <namespace>/<time> as ls prints it, or <time> for a snapshot of
--namespace, or a namespace for its newest complete snapshot; default the newest
complete snapshot of --namespace.

export and restore connect to Redis: --redis host:port[,host:port...] (env TOCK_REDIS),
--redis-username and --redis-password (env TOCK_REDIS_USERNAME, TOCK_REDIS_PASSWORD).
--namespace (env TOCK_NAMESPACE, default tock) names the namespace to export, to
restore into, or to list.
`

// snapshotCmd is one tock snapshot command being run.
type snapshotCmd struct {
	*cli
	fs       *flag.FlagSet
	where    string
	ns       string
	asJSON   bool
	parallel int
	redis    string
	user     string
	password string
}

// runSnapshot runs tock snapshot export|restore|verify|ls.
func runSnapshot(ctx context.Context, args []string, c *cli) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprint(c.errOut, snapshotUsage)
		return flag.ErrHelp
	}
	sub, args := args[0], args[1:]
	s := &snapshotCmd{cli: c, fs: flag.NewFlagSet("tock snapshot "+sub, flag.ContinueOnError)}
	s.fs.SetOutput(c.errOut)
	s.fs.Usage = func() {
		fmt.Fprint(c.errOut, snapshotUsage+"\nFlags of tock snapshot "+sub+":\n")
		s.fs.PrintDefaults()
	}
	ns := c.getenv("TOCK_NAMESPACE")
	if ns == "" {
		ns = "tock"
	}
	s.fs.StringVar(&s.ns, "namespace", ns, "the namespace (env TOCK_NAMESPACE)")
	s.fs.BoolVar(&s.asJSON, "json", false, "print JSON instead of text")
	switch sub {
	case "export":
		s.locationFlag("to", "where the snapshot goes")
		s.redisFlags()
		keep := s.fs.Int("keep", 0, "after the export, keep only the newest N complete snapshots of the namespace (0: delete none)")
		if err := s.parse(args); err != nil {
			return err
		}
		if *keep < 0 {
			return fmt.Errorf("%s: --keep must not be negative, got %d", s.fs.Name(), *keep)
		}
		return s.export(ctx, *keep)
	case "restore":
		s.locationFlag("from", "where the snapshot is")
		s.redisFlags()
		ref := s.fs.String("snapshot", "", "the snapshot to restore (default: the newest complete one of --namespace)")
		shards := s.fs.Int("shards", 0, "shard count of a new namespace (default: the snapshot's)")
		bucket := s.fs.Duration("bucket", 0, "due bucket width of a new namespace (default: the snapshot's)")
		if err := s.parse(args); err != nil {
			return err
		}
		return s.restore(ctx, *ref, *shards, *bucket)
	case "verify":
		s.locationFlag("from", "where the snapshot is")
		ref := s.fs.String("snapshot", "", "the snapshot to check (default: the newest complete one of --namespace)")
		if err := s.parse(args); err != nil {
			return err
		}
		return s.verify(ctx, *ref)
	case "ls", "list":
		s.locationFlag("from", "where the snapshots are")
		all := s.fs.Bool("all", false, "list the snapshots of every namespace")
		if err := s.parse(args); err != nil {
			return err
		}
		if *all {
			s.ns = ""
		}
		return s.list(ctx)
	}
	return &usageError{fmt.Sprintf("tock snapshot: unknown command %q (want export, restore, verify or ls)", sub)}
}

func (s *snapshotCmd) locationFlag(name, what string) {
	s.fs.StringVar(&s.where, name, s.getenv("TOCK_SNAPSHOT_TO"),
		what+": a directory, file:///dir or s3://bucket?... (env TOCK_SNAPSHOT_TO)")
	s.fs.IntVar(&s.parallel, "parallel", 4, "shard files written or read at once")
}

func (s *snapshotCmd) redisFlags() {
	s.fs.StringVar(&s.redis, "redis", s.getenv("TOCK_REDIS"), "Redis address(es), comma-separated: a server or Cluster nodes (env TOCK_REDIS)")
	s.fs.StringVar(&s.user, "redis-username", s.getenv("TOCK_REDIS_USERNAME"), "Redis ACL user name (env TOCK_REDIS_USERNAME)")
	s.fs.StringVar(&s.password, "redis-password", s.getenv("TOCK_REDIS_PASSWORD"), "Redis password (env TOCK_REDIS_PASSWORD)")
}

// parse parses the flags and checks the ones every command has.
func (s *snapshotCmd) parse(args []string) error {
	if err := s.fs.Parse(args); err != nil {
		return err
	}
	switch {
	case s.fs.NArg() > 0:
		return fmt.Errorf("%s: unexpected argument %q", s.fs.Name(), s.fs.Arg(0))
	case s.where == "":
		flagName := "--from"
		if s.fs.Lookup("to") != nil {
			flagName = "--to"
		}
		return fmt.Errorf("%s: %s (or TOCK_SNAPSHOT_TO) is required: a directory, file:///dir or s3://bucket?region=...", s.fs.Name(), flagName)
	case s.parallel < 1:
		return fmt.Errorf("%s: --parallel must be at least 1, got %d", s.fs.Name(), s.parallel)
	case s.fs.Lookup("redis") != nil && strings.Trim(s.redis, " ,") == "":
		return fmt.Errorf("%s: --redis (or TOCK_REDIS) is required: address of a Redis server, or of Redis Cluster nodes", s.fs.Name())
	}
	return nil
}

// bucket opens the snapshot location.
func (s *snapshotCmd) bucket(ctx context.Context) (*blob.Bucket, error) {
	b, err := snapshot.OpenBucket(ctx, s.where)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.fs.Name(), err)
	}
	return b, nil
}

// connect connects to Redis.
func (s *snapshotCmd) connect() (rueidis.Client, error) {
	c := &config{redisUsername: s.user, redisPassword: s.password}
	for _, a := range splitList(s.redis) {
		if err := checkAddr(a, 1); err != nil {
			return nil, fmt.Errorf("%s: --redis %q: %w", s.fs.Name(), a, err)
		}
		c.redis = append(c.redis, a)
	}
	rc, err := c.connect()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.fs.Name(), err)
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
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
	}
	if !ok {
		return fmt.Errorf("%s: namespace %q does not exist in Redis at %s: nothing to export", s.fs.Name(), s.ns, s.redis)
	}
	st, err := shard.Open(ctx, rc, shard.Config{Namespace: s.ns, Shards: shards, BucketSize: bucketWidth})
	if err != nil {
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
	}
	b, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	m, err := snapshot.Export(ctx, st, b, snapshot.ExportOptions{Parallel: s.parallel})
	if err != nil {
		return err
	}
	var pruned []string
	if keep > 0 {
		if pruned, err = snapshot.Prune(ctx, b, s.ns, keep); err != nil {
			return fmt.Errorf("snapshot %s written, but: %w", m.ID, err)
		}
	}
	if s.asJSON {
		return s.printJSON(struct {
			*snapshot.Manifest
			Pruned []string `json:"pruned"`
		}{m, append([]string{}, pruned...)})
	}
	fmt.Fprintf(s.out, "snapshot %s: %d jobs in %d files, %s, in %s\n", m.ID, m.Jobs, len(m.Files),
		byteSize(m.Bytes), m.Finished.Sub(m.Started).Round(time.Millisecond))
	for _, id := range pruned {
		fmt.Fprintf(s.out, "deleted %s\n", id)
	}
	return nil
}

func (s *snapshotCmd) restore(ctx context.Context, ref string, shards int, bucketWidth time.Duration) error {
	if shards < 0 || bucketWidth < 0 {
		return fmt.Errorf("%s: --shards and --bucket must not be negative", s.fs.Name())
	}
	b, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	id, err := snapshot.Resolve(ctx, b, ref, s.ns)
	if err != nil {
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
	}
	// Verified before the namespace is opened (which initialises a new one).
	m, err := snapshot.Verify(ctx, b, id, snapshot.ReadOptions{Parallel: s.parallel})
	if err != nil {
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
	}
	rc, err := s.connect()
	if err != nil {
		return err
	}
	defer rc.Close()
	cfg := shard.Config{Namespace: s.ns, Shards: m.Shards, BucketSize: time.Duration(m.BucketMs) * time.Millisecond}
	have, haveBucket, exists, err := shard.NamespaceSettings(ctx, rc, s.ns)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
	case exists && (shards != 0 && shards != have || bucketWidth != 0 && bucketWidth != haveBucket):
		return fmt.Errorf("%s: namespace %q exists with %d shards and %s buckets, which --shards and --bucket cannot change "+
			"(leave them out, or restore into another --namespace)", s.fs.Name(), s.ns, have, haveBucket)
	case exists:
		cfg.Shards, cfg.BucketSize = have, haveBucket
	default:
		if shards != 0 {
			cfg.Shards = shards
		}
		if bucketWidth != 0 {
			cfg.BucketSize = bucketWidth
		}
	}
	st, err := shard.Open(ctx, rc, cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
	}
	res, err := snapshot.RestoreVerified(ctx, st, b, m, snapshot.ReadOptions{Parallel: s.parallel})
	if err != nil {
		if res != nil && res.Restored > 0 {
			err = fmt.Errorf("%w (%d jobs were restored; run the same command again to complete the restore)", err, res.Restored)
		}
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
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
		}{m.ID, s.ns, cfg.Shards, res.Resumed, res.Restored, res.Existed, res.Expired})
	}
	if res.Resumed {
		fmt.Fprintf(s.out, "completing an interrupted restore of %s\n", m.ID)
	}
	fmt.Fprintf(s.out, "restored %d jobs from %s into namespace %q (%d shards)", res.Restored, m.ID, s.ns, cfg.Shards)
	if res.Existed > 0 || res.Expired > 0 {
		fmt.Fprintf(s.out, "; %d were there already, %d had expired", res.Existed, res.Expired)
	}
	fmt.Fprintln(s.out)
	return nil
}

func (s *snapshotCmd) verify(ctx context.Context, ref string) error {
	b, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	id, err := snapshot.Resolve(ctx, b, ref, s.ns)
	if err != nil {
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
	}
	m, err := snapshot.Verify(ctx, b, id, snapshot.ReadOptions{Parallel: s.parallel})
	if err != nil {
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
	}
	if s.asJSON {
		return s.printJSON(m)
	}
	fmt.Fprintf(s.out, "snapshot %s is intact: %d jobs in %d files, %s\n", m.ID, m.Jobs, len(m.Files), byteSize(m.Bytes))
	return nil
}

func (s *snapshotCmd) list(ctx context.Context) error {
	b, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	infos, err := snapshot.List(ctx, b, s.ns)
	if err != nil {
		return fmt.Errorf("%s: %w", s.fs.Name(), err)
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
	fmt.Fprintln(w, "ID\tSTARTED\tJOBS\tSHARDS\tSIZE\tSTATUS")
	for _, in := range infos {
		started := in.Time.In(s.location()).Format(time.DateTime)
		if m := in.Manifest; m != nil {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\tcomplete\n", in.ID, started, m.Jobs, m.Shards, byteSize(m.Bytes))
			continue
		}
		status := "incomplete"
		var ce *snapshot.CorruptError
		if errors.As(in.Err, &ce) {
			status = "damaged: " + ce.Msg
		} else if !errors.Is(in.Err, snapshot.ErrIncomplete) {
			status = "unreadable: " + in.Err.Error()
		}
		fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t%s\n", in.ID, started, status)
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
