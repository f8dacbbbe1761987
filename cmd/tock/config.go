package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/executor"
	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/egress"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// command is one of the commands that read the settings table; setting.cmds is a set
// of them.
type command uint16

const (
	cmdServer command = 1 << iota
	cmdIngest
	cmdDispatcher
	cmdInit
	cmdSnapshotExport
	cmdSnapshotRestore
	cmdSnapshotVerify
	cmdSnapshotLs
	cmdExecutor

	cmdRoles    = cmdServer | cmdIngest | cmdDispatcher | cmdExecutor // the commands that run a role
	cmdSnapshot = cmdSnapshotExport | cmdSnapshotRestore | cmdSnapshotVerify | cmdSnapshotLs
	cmdRedis    = cmdRoles | cmdInit | cmdSnapshotExport | cmdSnapshotRestore // the commands that connect to Redis
	cmdAll      = cmdRoles | cmdInit | cmdSnapshot
)

// commandInfo names the commands of the settings table and says what each does, for
// --help and docs/config.md.
var commandInfo = []struct {
	cmd   command
	name  string
	about string
}{
	{cmdServer, "server", "Run the HTTP API (ingest) and a dispatcher against Redis or Redis Cluster; " +
		"--roles api or --roles dispatcher runs one of them. SIGINT or SIGTERM shuts down in order: " +
		"the API, the dispatcher, snapshots, then the Redis client."},
	{cmdIngest, "ingest", "Run the HTTP API only (the api role of tock server). " +
		"SIGINT or SIGTERM stops the API, then closes the Redis client."},
	{cmdDispatcher, "dispatcher", "Run a dispatcher only (the dispatcher role of tock server): the live " +
		"dispatchers of a namespace share its shards and fire their due runs. SIGINT or SIGTERM " +
		"hands its shards back, stops snapshots, then closes the Redis client."},
	{cmdExecutor, "executor", "Run the push executor only (the push role of tock server): it claims the " +
		"runs of jobs with a target from --push-queue and delivers them as signed HTTP requests " +
		"(docs/executors.md, Push). SIGINT or SIGTERM stops claiming, lets deliveries in flight " +
		"finish, then closes the Redis client."},
	{cmdInit, "init", "Initialise a namespace: record its shard count and bucket width in Redis. " +
		"Reports whether it created the namespace or found it already initialised with the same " +
		"settings; fails, naming the setting, when the namespace was initialised with others. " +
		"The other commands initialise a new namespace too, with the settings they are given."},
	{cmdSnapshotExport, "snapshot export", "Write a snapshot of the namespace to --to: a compressed " +
		"file per shard, then a manifest. --keep N then deletes all but the newest N complete " +
		"snapshots of the namespace."},
	{cmdSnapshotRestore, "snapshot restore", "Check a snapshot in --from whole, then rebuild the " +
		"namespace from it. The namespace must hold no jobs (a restore of the same snapshot that was " +
		"interrupted is completed). A new namespace gets the snapshot's shard count and bucket width " +
		"unless the shards or bucket setting is given; an existing one keeps its own (jobs move to " +
		"their shards). --snapshot ID is <namespace>/<time> as ls prints it, <time> for a snapshot of " +
		"--namespace, or a namespace for its newest complete snapshot; default the newest complete " +
		"snapshot of --namespace."},
	{cmdSnapshotVerify, "snapshot verify", "Read a snapshot in --from whole and check every file, " +
		"without restoring it. --snapshot ID as for tock snapshot restore."},
	{cmdSnapshotLs, "snapshot ls", "List the snapshots in --from, newest first: those of the namespace " +
		"when the namespace setting is given, else (or with --all) those of every namespace. " +
		"A location that does not exist is an error, and is not created."},
}

func (c command) String() string {
	for _, ci := range commandInfo {
		if ci.cmd == c {
			return ci.name
		}
	}
	return "command(" + strconv.Itoa(int(c)) + ")"
}

// setting is one row of the settings table: a flag, its environment variable, its key
// in the --config file, its default and the commands that read it. A value comes from
// the flag, else the environment variable, else the file, else the default.
type setting struct {
	flag     string  // the flag's name without dashes; also names the setting in the config
	env      string  // environment variable; default TOCK_ and flag in upper snake case
	key      string  // config-file key; default flag in snake case; noKey for none
	arg      string  // what the value looks like, in --help
	def      string  // default value, parsed like any other value ("" for none)
	defText  string  // default in words, when def alone would mislead
	help     string  // what the setting means
	cmds     command // the commands that read it
	required command // the commands that require a value other than ""
	// flagIn names the setting's flag in the commands where it is not flag.
	flagIn map[command]string
	// list settings hold several values: a repeated flag adds to the list, and the
	// environment and the file separate them with commas (the file also takes a YAML
	// sequence). parse is called for each.
	list bool
	// secret values are never printed, not even in error messages.
	secret bool
	// parse checks a value and stores it in c; its error says what is wanted and is
	// prefixed with where the value came from. Nil for --config, which loadConfig reads.
	parse func(c *config, v string) error
}

// noKey is setting.key for a setting the config file cannot hold.
const noKey = "-"

// flagName returns the name of the setting's flag in cmd.
func (s *setting) flagName(cmd command) string {
	if name, ok := s.flagIn[cmd]; ok {
		return name
	}
	return s.flag
}

func (s *setting) envName() string {
	if s.env != "" {
		return s.env
	}
	return "TOCK_" + strings.ToUpper(strings.ReplaceAll(s.flag, "-", "_"))
}

// fileKey returns the setting's key in the config file, "" for none.
func (s *setting) fileKey() string {
	switch s.key {
	case noKey:
		return ""
	case "":
		return strings.ReplaceAll(s.flag, "-", "_")
	}
	return s.key
}

// config is the validated configuration of one of the commands of commandInfo.
type config struct {
	cmd           command
	redis         []string
	redisUsername string
	redisPassword string
	namespace     string
	shards        int
	bucket        time.Duration
	http          string
	tokens        []ingest.Token
	maxBacklog    int64
	maxBatch      int
	durability    shard.Durability // Timeout from --durability-timeout
	api, dispatch bool             // the roles to run
	push          bool             // the push executor role
	pushSecrets   []string
	pushAllow     []string
	pushQueues    []string
	pushConc      int
	pushPerHost   int
	pushFailures  int
	pushCooldown  time.Duration
	name          string
	leaseTTL      time.Duration
	fireLead      time.Duration
	coldAfter     time.Duration
	noPack        bool
	snapshotTo    string
	snapshotEvery time.Duration
	snapshotKeep  int
	metricsHTTP   string
	logLevel      slog.Level
	shutdown      time.Duration
	// values holds where each setting's value came from, by flag name.
	values map[string]value
}

// source says where a value came from, in increasing precedence.
type source uint8

const (
	fromDefault source = iota
	fromFile
	fromEnv
	fromFlag
)

// value is a setting's raw value and where it came from.
type value struct {
	text string
	src  source
	file string // fromFile: the file's path
	line int    // fromFile: the line of the key
}

// given reports whether the setting named flag was set by a flag, the environment or
// the config file, rather than left to its default.
func (c *config) given(flag string) bool { return c.values[flag].src != fromDefault }

// settingError is an invalid setting. Its message names the setting and where its value
// came from: `TOCK_SHARDS="abc" (env): want a whole number from 1 to 4096`.
type settingError struct {
	where string
	err   error
}

func (e *settingError) Error() string { return e.where + ": " + e.err.Error() }

func (e *settingError) Unwrap() error { return e.err }

// errorf returns a *settingError for the value of the setting named flag.
func (c *config) errorf(flag, format string, args ...any) error {
	return &settingError{where: settingByFlag(flag).where(c.cmd, c.values[flag]), err: fmt.Errorf(format, args...)}
}

// where describes a value of s in cmd and where it came from, leaving secrets out.
func (s *setting) where(cmd command, v value) string {
	q := ""
	if !s.secret {
		q = strconv.Quote(v.text)
	}
	flag := s.flagName(cmd)
	switch v.src {
	case fromFlag:
		return strings.TrimSpace("--" + flag + " " + q)
	case fromEnv:
		if q != "" {
			q = "=" + q
		}
		return s.envName() + q + " (env)"
	case fromFile:
		return strings.TrimSpace(fmt.Sprintf("%s line %d: %s %s", v.file, v.line, s.fileKey(), q))
	}
	return strings.TrimSpace("--" + flag + " default " + q)
}

var settings = []*setting{
	{flag: "config", key: noKey, arg: "path", cmds: cmdAll,
		help: "YAML file of settings, keyed by the file keys listed here; an unknown key is an error"},
	{flag: "redis", arg: "host:port[,host:port...]", cmds: cmdRedis, list: true, required: cmdRedis,
		help: "address of a Redis server, or of Redis Cluster nodes (one is enough: the client finds the others)",
		parse: func(c *config, v string) error {
			if err := checkAddr(v, 1); err != nil {
				return err
			}
			c.redis = append(c.redis, v)
			return nil
		}},
	{flag: "redis-username", arg: "name", cmds: cmdRedis,
		help:  "Redis ACL user name (AUTH); empty: the default user",
		parse: func(c *config, v string) error { c.redisUsername = v; return nil }},
	{flag: "redis-password", arg: "password", cmds: cmdRedis, secret: true,
		help:  "Redis password (AUTH); empty: none",
		parse: func(c *config, v string) error { c.redisPassword = v; return nil }},
	{flag: "namespace", arg: "name", def: "tock", cmds: cmdAll,
		help: "prefix of every Redis key of a deployment: 1 to 32 of A-Z a-z 0-9 . _ ~ -",
		parse: func(c *config, v string) error {
			if err := job.ValidateID("namespace", v, 32); err != nil {
				return fieldMessage(err)
			}
			c.namespace = v
			return nil
		}},
	{flag: "shards", arg: "N", def: strconv.Itoa(shard.DefaultShards), cmds: cmdRoles | cmdInit | cmdSnapshotRestore,
		defText: "the namespace's; for a new one " + strconv.Itoa(shard.DefaultShards) + " (snapshot restore: the snapshot's)",
		help:    "shard count, fixed when the namespace is initialised (1 to " + strconv.Itoa(shard.MaxShards) + ")",
		parse: func(c *config, v string) error {
			n, err := parseCount(v, 1, shard.MaxShards)
			c.shards = int(n)
			return err
		}},
	{flag: "bucket", arg: "duration", def: "1m", cmds: cmdRoles | cmdInit | cmdSnapshotRestore,
		defText: "the namespace's; for a new one 1m (snapshot restore: the snapshot's)",
		help:    "width of a due-time bucket, fixed when the namespace is initialised (1s to 24h)",
		parse: func(c *config, v string) (err error) {
			c.bucket, err = parseDuration(v, time.Second, 24*time.Hour)
			return err
		}},
	{flag: "cold-after", arg: "duration", def: "10m", cmds: cmdRoles,
		help: "one-time jobs due further ahead than this when created are stored cold, packed per due bucket at " +
			"about half the memory, until dispatchers thaw their bucket half this time before it starts " +
			"(0: never; else 1m to 8760h; give ingest and dispatcher processes the same value)",
		parse: func(c *config, v string) error {
			d, err := parseDuration(v, 0, 8760*time.Hour)
			switch {
			case err != nil:
				return err
			case d == 0:
				c.coldAfter = -1
			case d < time.Minute:
				return errors.New("want 0 (never) or a duration from 1m to 8760h, such as 10m")
			default:
				c.coldAfter = d
			}
			return nil
		}},
	{flag: "pack", arg: "on|off", def: "on", cmds: cmdRoles,
		help: "keep one-time jobs that are not cold packed, one value each in a hash per shard, so that firing, " +
			"claiming and acknowledging many runs read and write once per call (off: a job hash each, as before " +
			"packing; for a rolling upgrade from such a version, until every worker is upgraded: an older worker " +
			"drops the runs of packed jobs)",
		parse: func(c *config, v string) error {
			switch strings.ToLower(v) {
			case "on", "true", "1":
				c.noPack = false
			case "off", "false", "0":
				c.noPack = true
			default:
				return errors.New("want on or off")
			}
			return nil
		}},
	{flag: "http", arg: "host:port", def: ingest.DefaultAddr, cmds: cmdServer | cmdIngest,
		help: "listen address of the HTTP API (port 0 picks a free one)",
		parse: func(c *config, v string) error {
			c.http = v
			return checkAddr(v, 0)
		}},
	{flag: "token", env: "TOCK_TOKENS", key: "tokens", arg: "secret:scope", cmds: cmdServer | cmdIngest, list: true, secret: true,
		help: "a bearer token the API accepts: a secret of at least 16 characters, a colon, and the scope read, write or worker (worker: only the run endpoints /v1/runs… and workflow nodes' results); " +
			"repeat the flag, or separate tokens with commas. None: no authentication (meant for loopback addresses)",
		parse: func(c *config, v string) error {
			t, err := parseToken(v)
			if err != nil {
				return err
			}
			for _, o := range c.tokens {
				if o.Secret == t.Secret {
					return errors.New("the same secret twice")
				}
			}
			c.tokens = append(c.tokens, t)
			return nil
		}},
	{flag: "max-backlog", arg: "N", def: "0", cmds: cmdServer | cmdIngest,
		help: "refuse creates with 429 while this many runs are ready or in flight (0: no limit). The backlog is measured " +
			"every 500ms and each API process adds the runs its own creates made ready since, so creates through one process " +
			"take it past the limit by less than one request's jobs (a batch; a single create never does); n API processes " +
			"together by up to (n-1) times the limit more",
		parse: func(c *config, v string) (err error) {
			c.maxBacklog, err = parseCount(v, 0, 1<<62)
			return err
		}},
	{flag: "max-batch", arg: "N", def: strconv.Itoa(ingest.DefaultMaxBatch), cmds: cmdServer | cmdIngest,
		help: "most jobs in one batch create (1 to 1000000)",
		parse: func(c *config, v string) error {
			n, err := parseCount(v, 1, 1_000_000)
			c.maxBatch = int(n)
			return err
		}},
	{flag: "durability", arg: "mode", def: "async", cmds: cmdServer | cmdIngest,
		help: "what a create or management call waits for before the API acknowledges it: async (AOF and " +
			"asynchronous replication) or replicas:N (N replicas confirm it, with Redis WAIT)",
		parse: func(c *config, v string) error {
			d, err := shard.ParseDurability(v)
			if err != nil {
				return errors.New("want async or replicas:N with N from 1 to 16")
			}
			c.durability.Replicas = d.Replicas
			return nil
		}},
	{flag: "durability-timeout", arg: "duration", def: "1s", cmds: cmdServer | cmdIngest,
		help: "longest wait for the replicas of --durability replicas:N (1ms to 1m)",
		parse: func(c *config, v string) (err error) {
			c.durability.Timeout, err = parseDuration(v, time.Millisecond, time.Minute)
			return err
		}},
	{flag: "roles", arg: "role[,role]", def: "api,dispatcher", cmds: cmdServer, list: true,
		help: "what tock server runs: api (or ingest), dispatcher, push (or executor: the push executor; also run by default when --push-secret is given), or several",
		parse: func(c *config, v string) error {
			switch v {
			case "api", "ingest":
				c.api = true
			case "dispatcher":
				c.dispatch = true
			case "push", "executor":
				c.push = true
			default:
				return fmt.Errorf("unknown role %q: want api, dispatcher, push, or several", v)
			}
			return nil
		}},
	{flag: "name", arg: "name", defText: "the host name and a random suffix", cmds: cmdServer | cmdDispatcher,
		help: "the dispatcher's name in leases and membership, unique among the namespace's dispatchers: " +
			"1 to 100 of A-Z a-z 0-9 . _ ~ -",
		parse: func(c *config, v string) error {
			if err := job.ValidateID("name", v, 100); err != nil {
				return fieldMessage(err)
			}
			c.name = v
			return nil
		}},
	{flag: "lease-ttl", arg: "duration", def: "3s", cmds: cmdServer | cmdDispatcher,
		help: "how long a shard lease lives without renewal: a dead dispatcher's shards fire again " +
			"on another within about 1.3 times this (300ms to 1m)",
		parse: func(c *config, v string) (err error) {
			c.leaseTTL, err = parseDuration(v, 300*time.Millisecond, time.Minute)
			return err
		}},
	{flag: "fire-lead", arg: "duration", def: "100ms", cmds: cmdServer | cmdDispatcher,
		help: "how far ahead of their due time the dispatcher fires runs; workers hold a run claimed " +
			"early until its due time (Redis clock), so firing and claiming happen before it (0 to 1s; 0: fire at the due time)",
		parse: func(c *config, v string) (err error) {
			c.fireLead, err = parseDuration(v, 0, dispatcher.MaxLead)
			return err
		}},
	{flag: "snapshot-to", arg: "location", cmds: cmdServer | cmdDispatcher | cmdSnapshot, required: cmdSnapshot,
		flagIn: map[command]string{cmdSnapshotExport: "to", cmdSnapshotRestore: "from", cmdSnapshotVerify: "from", cmdSnapshotLs: "from"},
		help: "where snapshots are: a directory, file:///dir, or s3://bucket?region=... (a gocloud.dev/blob URL: " +
			"add endpoint=http://host:9000&use_path_style=true for MinIO, prefix=folder/ for a folder; AWS " +
			"credentials come from the usual environment variables). tock server and tock dispatcher export " +
			"to it periodically (with --snapshot-every)",
		parse: func(c *config, v string) error {
			u, err := url.Parse(v)
			if err != nil {
				return errors.New("want a directory or a URL such as file:///var/lib/tock/snapshots or s3://bucket?region=us-east-1")
			}
			// The schemes snapshot.OpenBucket opens (a one-letter scheme is a Windows
			// drive); another one would fail only when the first export starts.
			if scheme := strings.ToLower(u.Scheme); len(scheme) > 1 && scheme != "file" && scheme != "s3" {
				return fmt.Errorf("scheme %q: want a directory, file:///dir or s3://bucket?region=<region>", u.Scheme)
			}
			c.snapshotTo = v
			return nil
		}},
	{flag: "snapshot-every", arg: "duration", def: "0", cmds: cmdServer | cmdDispatcher,
		help: "how often to export a snapshot to --snapshot-to (0: never; else 1s or more)",
		parse: func(c *config, v string) error {
			// snapshot.RunPeriodic refuses less than 1s.
			d, err := parseDurationText(v)
			if errors.Is(err, errDurationRange) {
				return err
			}
			if err != nil || d != 0 && d < time.Second {
				return errors.New("want 0, or a duration of 1s or more such as 10m or 1h")
			}
			c.snapshotEvery = d
			return nil
		}},
	{flag: "snapshot-keep", arg: "N", def: "24", cmds: cmdServer | cmdDispatcher,
		help: "how many periodic snapshots to keep; older ones are deleted (1 to 100000)",
		parse: func(c *config, v string) error {
			n, err := parseCount(v, 1, 100_000)
			c.snapshotKeep = int(n)
			return err
		}},
	{flag: "metrics-http", arg: "host:port", defText: "none: the API serves GET /metrics", cmds: cmdRoles,
		help: "listen address of a separate GET /metrics endpoint (for the dispatcher role, which has no API)",
		parse: func(c *config, v string) error {
			c.metricsHTTP = v
			return checkAddr(v, 0)
		}},
	{flag: "log-level", arg: "level", def: "info", cmds: cmdRoles,
		help: "debug, info, warn or error",
		parse: func(c *config, v string) error {
			switch v {
			case "debug", "info", "warn", "error":
				return c.logLevel.UnmarshalText([]byte(v))
			}
			return errors.New("want debug, info, warn or error")
		}},
	{flag: "push-secret", arg: "secret", cmds: cmdServer | cmdExecutor, list: true, secret: true, required: cmdExecutor,
		help: "a secret that signs push deliveries (Tock-Signature), at least 16 characters; repeat it during a rotation: the first signs, receivers accept any",
		parse: func(c *config, v string) error {
			if len(v) < 16 {
				return errors.New("want at least 16 characters")
			}
			c.pushSecrets = append(c.pushSecrets, v)
			return nil
		}},
	{flag: "push-allow", arg: "host|CIDR", defText: "none: any public address", cmds: cmdServer | cmdIngest | cmdExecutor, list: true,
		help: "a host (or *.domain) or an address or CIDR push targets may reach; with entries, only those. Loopback, private and link-local addresses need a CIDR entry; checked at create and after DNS resolution",
		parse: func(c *config, v string) error {
			if _, err := egress.Parse([]string{v}); err != nil {
				return err
			}
			c.pushAllow = append(c.pushAllow, v)
			return nil
		}},
	{flag: "push-queue", arg: "queue", def: job.DefaultPushQueue, cmds: cmdServer | cmdExecutor, list: true,
		help: "a queue the push executor claims from",
		parse: func(c *config, v string) error {
			if err := job.ValidateID("queue", v, job.MaxQueueLen); err != nil {
				return fieldMessage(err)
			}
			c.pushQueues = append(c.pushQueues, v)
			return nil
		}},
	{flag: "push-concurrency", arg: "N", def: strconv.Itoa(executor.DefaultConcurrency), cmds: cmdServer | cmdExecutor,
		help: "push deliveries in flight at once (1 to 100000)",
		parse: func(c *config, v string) error {
			n, err := parseCount(v, 1, 100_000)
			c.pushConc = int(n)
			return err
		}},
	{flag: "push-per-host", arg: "N", def: strconv.Itoa(executor.DefaultPerHost), cmds: cmdServer | cmdExecutor,
		help: "push deliveries in flight at once per target host, and idle connections kept per host (1 to 10000); a run over it waits a second, with no attempt used",
		parse: func(c *config, v string) error {
			n, err := parseCount(v, 1, 10_000)
			c.pushPerHost = int(n)
			return err
		}},
	{flag: "push-breaker-failures", arg: "N", def: "5", cmds: cmdServer | cmdExecutor,
		help: "consecutive failed deliveries to a host that open its circuit breaker (0: breakers off)",
		parse: func(c *config, v string) error {
			n, err := parseCount(v, 0, 100_000)
			c.pushFailures = int(n)
			return err
		}},
	{flag: "push-breaker-cooldown", arg: "duration", def: "30s", cmds: cmdServer | cmdExecutor,
		help: "how long an open breaker snoozes a host's runs before a half-open probe (1ms to 24h)",
		parse: func(c *config, v string) (err error) {
			c.pushCooldown, err = parseDuration(v, time.Millisecond, 24*time.Hour)
			return err
		}},
	{flag: "shutdown-timeout", arg: "duration", def: "30s", cmds: cmdRoles,
		help: "how long each step of a graceful shutdown may take (1ms to 1h)",
		parse: func(c *config, v string) (err error) {
			c.shutdown, err = parseDuration(v, time.Millisecond, time.Hour)
			return err
		}},
}

// settingByFlag returns the setting named flag; it panics for an unknown one (a bug).
func settingByFlag(flag string) *setting {
	for _, s := range settings {
		if s.flag == flag {
			return s
		}
	}
	panic("tock: no setting --" + flag)
}

// flagValue collects the raw values of one setting's flag.
type flagValue struct {
	list bool
	vals []string
}

func (f *flagValue) String() string { return strings.Join(f.vals, ",") }

func (f *flagValue) Set(v string) error {
	if !f.list {
		f.vals = f.vals[:0] // the last one counts
	}
	f.vals = append(f.vals, v)
	return nil
}

// loadConfig reads the settings of cmd from args (flags), the environment (getenv) and
// the --config file, in that order of precedence, and validates them before anything
// connects. addFlags, when set, defines the command's flags that are not settings. For
// -h or --help it prints the help to out and returns flag.ErrHelp. An invalid setting is a
// *settingError; all of them are returned at once, joined.
//
// Every error but flag.ErrHelp is a *usageError: nothing ran.
func loadConfig(cmd command, args []string, getenv func(string) string, out io.Writer, addFlags func(*flag.FlagSet)) (*config, error) {
	c, err := loadSettings(cmd, args, getenv, out, addFlags)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return nil, &usageError{cmd: "tock " + cmd.String(), err: err}
	}
	return c, err
}

func loadSettings(cmd command, args []string, getenv func(string) string, out io.Writer, addFlags func(*flag.FlagSet)) (*config, error) {
	fs := newFlagSet("tock " + cmd.String())
	flags := map[string]*flagValue{}
	for _, s := range settings {
		if s.cmds&cmd != 0 {
			flags[s.flag] = &flagValue{list: s.list}
			fs.Var(flags[s.flag], s.flagName(cmd), s.help)
		}
	}
	if addFlags != nil {
		addFlags(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(out, cmd, fs)
			return nil, err
		}
		return nil, fmt.Errorf("%w (tock %s --help lists the flags)", err, cmd)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (tock %s --help lists the flags)", fs.Arg(0), cmd)
	}

	c := &config{cmd: cmd, values: map[string]value{}}
	var file map[string]value
	if path := resolve(settingByFlag("config"), flags, getenv, nil); path.text != "" {
		var err error
		if file, err = readConfigFile(path.text); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, s := range settings {
		if s.cmds&cmd == 0 || s.parse == nil {
			continue
		}
		v := resolve(s, flags, getenv, file)
		c.values[s.flag] = v
		if err := s.parseValue(c, v.text); err != nil {
			errs = append(errs, &settingError{where: s.where(cmd, v), err: err})
		} else if s.required&cmd != 0 && (v.text == "" || s.list && len(splitList(v.text)) == 0) {
			errs = append(errs, s.missing(cmd))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, c.check()
}

// parseValue parses v, every item of it for a list setting, into c.
func (s *setting) parseValue(c *config, v string) error {
	if !s.list {
		if v == "" && s.def == "" {
			return nil // not set, and none by default
		}
		return s.parse(c, v)
	}
	items := splitList(v)
	for i, item := range items {
		if err := s.parse(c, item); err != nil {
			if len(items) > 1 {
				return fmt.Errorf("item %d: %w", i+1, err)
			}
			return err
		}
	}
	return nil
}

// missing is the error for a setting that cmd requires and that has no value.
func (s *setting) missing(cmd command) error {
	where := "--" + s.flagName(cmd) + " (or " + s.envName()
	if k := s.fileKey(); k != "" {
		where += ", or " + k + " in the --config file"
	}
	return &settingError{where: where + ")", err: fmt.Errorf("required: %s", s.help)}
}

// check validates what no setting can alone.
func (c *config) check() error {
	switch {
	case c.cmd == cmdServer && !c.api && !c.dispatch && !c.push:
		return c.errorf("roles", "want api, dispatcher, push, or several")
	case c.cmd == cmdServer && c.push && len(c.pushSecrets) == 0:
		return c.errorf("push-secret", "the push role needs a signing secret")
	case c.cmd&(cmdServer|cmdDispatcher) != 0 && c.snapshotEvery > 0 && c.snapshotTo == "":
		return c.errorf("snapshot-every", "--snapshot-to is required to export snapshots")
	}
	switch c.cmd {
	case cmdIngest:
		c.api = true
	case cmdDispatcher:
		c.dispatch = true
	case cmdExecutor:
		c.push = true
	case cmdServer:
		if len(c.pushSecrets) > 0 && !c.given("roles") {
			c.push = true
		}
	}
	return nil
}

// resolve returns the value of s: its flag, else its environment variable, else its key
// in file, else its default.
func resolve(s *setting, flags map[string]*flagValue, getenv func(string) string, file map[string]value) value {
	if f := flags[s.flag]; f != nil && len(f.vals) > 0 {
		return value{text: strings.Join(f.vals, ","), src: fromFlag}
	}
	if v := getenv(s.envName()); v != "" {
		return value{text: v, src: fromEnv}
	}
	if v, ok := file[s.fileKey()]; ok {
		return v
	}
	return value{text: s.def}
}

// splitList splits a list setting's value at its commas, dropping empty items.
func splitList(v string) []string {
	var items []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// readConfigFile reads a YAML config file: a mapping from file keys to values (a YAML
// sequence for a list setting). An unknown key, a key given twice and a value of the
// wrong shape are errors naming the file and line.
func readConfigFile(path string) (map[string]value, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	vals := map[string]value{}
	if len(doc.Content) == 0 {
		return vals, nil // empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s line %d: want settings as key: value lines", path, root.Line)
	}
	keys := map[string]*setting{}
	for _, s := range settings {
		if k := s.fileKey(); k != "" {
			keys[k] = s
		}
	}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		s := keys[k.Value]
		if s == nil {
			msg := fmt.Sprintf("%s line %d: unknown setting %q", path, k.Line, k.Value)
			if near := closest(k.Value, keys); near != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", near)
			}
			errs = append(errs, errors.New(msg))
			continue
		}
		if prev, ok := vals[k.Value]; ok {
			errs = append(errs, fmt.Errorf("%s line %d: %s given twice (first on line %d)", path, k.Line, k.Value, prev.line))
			continue
		}
		text, err := scalarText(v, s.list)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s line %d: %s: %w", path, v.Line, k.Value, err))
			continue
		}
		vals[k.Value] = value{text: text, src: fromFile, file: path, line: k.Line}
	}
	return vals, errors.Join(errs...)
}

// scalarText returns the text of a config-file value: a scalar, or for a list setting
// a sequence of scalars joined with commas. Null is "".
func scalarText(n *yaml.Node, list bool) (string, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null":
		return "", nil
	case n.Kind == yaml.ScalarNode:
		return n.Value, nil
	case n.Kind == yaml.SequenceNode && list:
		items := make([]string, len(n.Content))
		for i, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("item %d: want a single value", i+1)
			}
			if strings.Contains(item.Value, ",") {
				return "", fmt.Errorf("item %d: a value cannot hold a comma", i+1)
			}
			items[i] = item.Value
		}
		return strings.Join(items, ","), nil
	case list:
		return "", errors.New("want a value or a list of values")
	}
	return "", errors.New("want a single value")
}

// closest returns the key nearest to k (at most 2 edits away), or "".
func closest(k string, keys map[string]*setting) string {
	best, bestD := "", 3
	for key := range keys {
		if d := editDistance(k, key); d < bestD || d == bestD && key < best {
			best, bestD = key, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// parseCount parses a whole number from lo to hi.
func parseCount(v string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		if hi >= 1<<62 {
			return 0, fmt.Errorf("want a whole number, %d or more", lo)
		}
		return 0, fmt.Errorf("want a whole number from %d to %d", lo, hi)
	}
	return n, nil
}

// parseDuration parses a Go duration from lo to hi.
func parseDuration(v string, lo, hi time.Duration) (time.Duration, error) {
	d, err := parseDurationText(v)
	if errors.Is(err, errDurationRange) {
		return 0, fmt.Errorf("%w; want a duration from %s to %s", err, shortDuration(lo), shortDuration(hi))
	}
	if err != nil || d < lo || d > hi {
		return 0, fmt.Errorf("want a duration from %s to %s, such as 90s or 10m", shortDuration(lo), shortDuration(hi))
	}
	return d, nil
}

// shortDuration formats d without zero minor units: 1m rather than 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// checkAddr checks a host:port address whose port is minPort to 65535; a host is
// required unless minPort is 0 (a listen address, where no host means every interface).
func checkAddr(v string, minPort int) error {
	host, port, err := net.SplitHostPort(v)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil || p < minPort || p > 65535 || host == "" && minPort > 0 {
		if minPort > 0 {
			return fmt.Errorf("want host:port with a port from %d to 65535", minPort)
		}
		return errors.New("want host:port or :port with a port from 0 to 65535")
	}
	return nil
}

// parseToken parses "secret:scope", scope read, write or worker; the secret is what precedes
// the last colon.
func parseToken(v string) (ingest.Token, error) {
	i := strings.LastIndexByte(v, ':')
	if i <= 0 {
		return ingest.Token{}, errors.New(`want "secret:scope" with scope read, write or worker`)
	}
	secret, scope := v[:i], ingest.Scope(v[i+1:])
	if scope != ingest.ScopeRead && scope != ingest.ScopeWrite && scope != ingest.ScopeWorker {
		return ingest.Token{}, fmt.Errorf("scope %q: want read, write or worker", scope)
	}
	if len(secret) < 16 {
		return ingest.Token{}, errors.New("secret shorter than 16 characters")
	}
	return ingest.Token{Secret: secret, Scope: scope}, nil
}

// fieldMessage drops the field name from a *job.FieldError: the setting's name comes
// first already.
func fieldMessage(err error) error {
	if fe, ok := errors.AsType[*job.FieldError](err); ok {
		return errors.New(fe.Msg)
	}
	return err
}

// printHelp prints the help of cmd: what it does, then every flag with its environment
// variable, config-file key and default.
func printHelp(w io.Writer, cmd command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: tock %s [flags]\n\n", cmd)
	for _, ci := range commandInfo {
		if ci.cmd == cmd {
			fmt.Fprintln(w, wrap(ci.about, 88, ""))
		}
	}
	fmt.Fprintf(w, "\n%s\n\nFlags:\n", wrap("A setting comes from its flag, else its environment variable, "+
		"else its key in the --config file, else its default. docs/config.md describes every setting.", 88, ""))
	for _, s := range settings {
		if s.cmds&cmd == 0 {
			continue
		}
		where := "env " + s.envName()
		if k := s.fileKey(); k != "" {
			where += ", file key " + k
		}
		switch {
		case s.required&cmd != 0:
			where += ", required"
		case s.defText != "":
			where += ", default " + s.defText
		case s.def != "":
			where += ", default " + s.def
		}
		fmt.Fprintf(w, "  --%s %s\n%s\n%s\n", s.flagName(cmd), s.arg, wrap(s.help, 88, "      "), wrap(where, 88, "      "))
	}
	printFlags(w, fs, func(f *flag.Flag) bool {
		_, setting := f.Value.(*flagValue) // printed above
		return setting
	})
}

// wrap fills text into lines of at most width bytes (longer words stay whole), each
// starting with indent.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(text) {
		if line != indent && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

// settingsMarkdown is the table of every setting in docs/config.md.
func settingsMarkdown() string {
	var b strings.Builder
	b.WriteString("| flag | environment | file key | default | commands | meaning |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	code := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + cell(s) + "`"
	}
	// names lists the names of the commands of set, in commandInfo's order.
	names := func(set command) string {
		var cmds []string
		for _, ci := range commandInfo {
			if set&ci.cmd != 0 {
				cmds = append(cmds, ci.name)
			}
		}
		return strings.Join(cmds, ", ")
	}
	for _, s := range settings {
		def := code(s.def)
		switch {
		case s.required == s.cmds:
			def = "required"
		case s.defText != "":
			def = cell(s.defText)
		}
		if s.required != 0 && s.required != s.cmds {
			def = strings.TrimPrefix(def+"; required by "+names(s.required), "; ")
		}
		flags := code("--" + s.flag + " " + s.arg)
		var others []string // the flag's other names, with their commands
		byName := map[string]command{}
		for _, ci := range commandInfo {
			if name := s.flagName(ci.cmd); s.cmds&ci.cmd != 0 && name != s.flag {
				if byName[name] == 0 {
					others = append(others, name)
				}
				byName[name] |= ci.cmd
			}
		}
		for _, name := range others {
			flags += fmt.Sprintf(", %s in %s", code("--"+name), names(byName[name]))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", flags, code(s.envName()),
			code(s.fileKey()), def, names(s.cmds), cell(s.help))
	}
	return b.String()
}
