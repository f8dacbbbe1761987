package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/tockhq/tock/ingest"
)

// The management commands (jobs, dead, queues) talk to the API through ingest.Client.

const defaultAPI = "http://127.0.0.1:8080"

const jobsUsage = `Usage:
  tock jobs create [job flags] | --file job.json | --file -   (a JobRequest, or an array for a batch)
  tock jobs get ID
  tock jobs ls [--queue Q] [--state S] [--limit N] [--cursor C] [--all]
  tock jobs patch ID [--payload JSON] [--at T | --delay D | --now | --cron EXPR --tz ZONE] [--priority P] [--max-attempts N]
  tock jobs cancel|pause|resume|trigger ID...
  tock jobs delete ID...       (removes jobs and their runs now; cancel keeps them a while)
  tock jobs runs ID
  tock jobs bulk ACTION (ID... | [--queue Q] [--state S] [--type T] [--prefix P] | --all)
                               (ACTION: cancel, pause, resume, trigger or delete)
API flags: --api URL (env TOCK_API, default ` + defaultAPI + `), --token T (env TOCK_TOKEN), --json
`

const deadUsage = `Usage:
  tock dead ls [--queue Q] [--limit N] [--cursor C] [--all]
  tock dead requeue RUN...     (RUN is "<job id>:<due ms>", as dead ls prints it)
  tock dead rm RUN...
  tock dead bulk requeue|delete (RUN... | --queue Q | --all)
API flags: --api URL (env TOCK_API, default ` + defaultAPI + `), --token T (env TOCK_TOKEN), --json
`

// cli is what a management command reads and writes; tests fill it with buffers.
type cli struct {
	out, errOut io.Writer
	in          io.Reader
	getenv      func(string) string
	loc         *time.Location // times in tables; nil means time.Local
	now         func() time.Time
	tty         bool // out is a terminal: queues --watch clears the screen
}

func osCLI() *cli {
	return &cli{out: os.Stdout, errOut: os.Stderr, in: os.Stdin, getenv: os.Getenv,
		tty: term.IsTerminal(int(os.Stdout.Fd()))}
}

func (c *cli) location() *time.Location {
	if c.loc == nil {
		return time.Local
	}
	return c.loc
}

func (c *cli) clock() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

// apiCmd is one management command being run: its flags, positional arguments and client.
type apiCmd struct {
	*cli
	fs     *flag.FlagSet
	api    string
	token  string
	asJSON bool
	args   []string
	client *ingest.Client
}

// apiHelp is the help of each management command, by its name after "tock ".
var apiHelp = map[string]commandHelp{
	"jobs create": {"tock jobs create --type TYPE SCHEDULE [flags] | --file FILE",
		"Create a job through the API. SCHEDULE is one of --at, --delay, --now or --cron (with --tz). " +
			"--file reads a JobRequest (JSON), or an array of them sent as one batch; - reads stdin. The " +
			"id is the idempotency key: the same definition again prints exists, another one fails with " +
			"409 conflict. --dry-run creates nothing and prints the next 10 fire times of --cron in --tz, " +
			"marking each that a daylight-saving change moves or repeats."},
	"jobs get": {"tock jobs get ID [flags]",
		"Print a job: its definition, state, next run (or next attempt, while a retry waits) and shard."},
	"jobs ls": {"tock jobs ls [flags]",
		"List jobs, a page at a time (--all follows the cursors), with their state and next run."},
	"jobs patch": {"tock jobs patch ID [flags]",
		"Change a job's payload, schedule, priority or retry policy: the flags given."},
	"jobs cancel":  {"tock jobs cancel ID... [flags]", "Cancel jobs; a running handler's context is cancelled."},
	"jobs pause":   {"tock jobs pause ID... [flags]", "Pause jobs: no run starts until they are resumed."},
	"jobs resume":  {"tock jobs resume ID... [flags]", "Resume paused jobs."},
	"jobs trigger": {"tock jobs trigger ID... [flags]", "Fire jobs now, outside their schedule, and print the runs."},
	"jobs delete": {"tock jobs delete ID... [flags]",
		"Delete jobs now, whatever their state, with every run of them (scheduled, ready, in flight, " +
			"waiting for a retry, dead): a running handler's context is cancelled, and nothing of the job " +
			"is left to read. tock jobs cancel stops a job but keeps it for the retention period."},
	"jobs runs": {"tock jobs runs ID [flags]",
		"Print a job's last runs: due time, start, duration, worker, attempt, outcome and error."},
	"dead ls": {"tock dead ls [flags]",
		"List the dead-letter set: runs that failed their last attempt, a page at a time."},
	"dead requeue": {"tock dead requeue RUN... [flags]",
		"Give dead runs a fresh set of attempts and make them ready again. RUN is " +
			"<job id>:<due ms>, as tock dead ls prints it."},
	"dead rm": {"tock dead rm RUN... [flags]", "Delete dead runs for good. RUN is as for tock dead requeue."},
	"queues": {"tock queues [--watch] [flags]",
		"Print each queue's figures: paused or not, runs scheduled, ready, in flight and dead, runs fired " +
			"and fired per second; with workers in the API's process (tock dev), also runs processed and " +
			"failed and their lateness. --watch redraws every --interval until Ctrl-C, and keeps trying " +
			"while the API cannot be reached."},
	"queues pause":  {"tock queues pause QUEUE... [flags]", "Stop workers from claiming from queues (runs still fire)."},
	"queues resume": {"tock queues resume QUEUE... [flags]", "Let workers claim from paused queues again."},
}

func (c *cli) newAPICmd(name string) *apiCmd {
	a := &apiCmd{cli: c, fs: newFlagSet("tock " + name)}
	// The defaults from the environment are applied after parsing, so that --help does
	// not print them (a token is a secret).
	a.fs.StringVar(&a.api, "api", "", "API base `URL` (env TOCK_API, default "+defaultAPI+")")
	a.fs.StringVar(&a.token, "token", "", "bearer `token` (env TOCK_TOKEN)")
	a.fs.BoolVar(&a.asJSON, "json", false, "print the API's JSON reply instead of a table")
	return a
}

// usageErrorf returns a *usageError of the command.
func (a *apiCmd) usageErrorf(format string, args ...any) error {
	return usageErrorf(a.fs.Name(), "%s: "+format, append([]any{strings.TrimPrefix(a.fs.Name(), "tock ")}, args...)...)
}

// parse parses flags and positional arguments in any order, then builds the client.
// nargs is the number of positional arguments wanted: n ≥ 0 exactly, -1 at least one.
// For --help it prints the command's help and returns flag.ErrHelp; a bad command line
// is a *usageError.
func (a *apiCmd) parse(args []string, nargs int, what string) error {
	pos, err := parseInterspersed(a.fs, args)
	if err != nil {
		name := strings.TrimPrefix(a.fs.Name(), "tock ")
		return flagParseError(err, a.out, apiHelp[name], a.fs)
	}
	switch {
	case nargs >= 0 && len(pos) > nargs:
		return a.usageErrorf("unexpected argument %q", pos[nargs])
	case nargs > 0 && len(pos) < nargs, nargs < 0 && len(pos) == 0:
		return a.usageErrorf("%s is required", what)
	}
	a.args = pos
	if a.api == "" {
		a.api = cmp.Or(a.getenv("TOCK_API"), defaultAPI)
	}
	if a.token == "" {
		a.token = a.getenv("TOCK_TOKEN")
	}
	a.client, err = ingest.NewClient(a.api, a.token)
	if err != nil {
		return usageErrorf(a.fs.Name(), "%s: --api: %w", strings.TrimPrefix(a.fs.Name(), "tock "), err)
	}
	return nil
}

// parseInterspersed parses fs over args, allowing flags after positional arguments
// ("tock jobs get ID --json"); everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at "--" (consumed) or at the first non-flag argument.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func (a *apiCmd) close() {
	if a.client != nil {
		a.client.CloseIdleConnections()
	}
}

// printJSON writes v indented, one document per call.
func (a *apiCmd) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = a.out.Write(b)
	return err
}

func (a *apiCmd) table() *tabwriter.Writer {
	return tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
}

// aliases maps other names of the commands of a group (jobs, dead) to theirs.
var aliases = map[string]map[string]string{
	"jobs": {"list": "ls", "update": "patch"},
	"dead": {"list": "ls", "delete": "rm"},
}

// subcommand returns the command args[0] of group ("jobs") and its arguments, or an
// error: flag.ErrHelp once groupUsage is printed for --help, a *usageError when args
// names no command of subs.
func subcommand(c *cli, group, groupUsage string, args []string, subs ...string) (string, []string, error) {
	switch {
	case len(args) == 0:
		return "", nil, &usageError{cmd: "tock " + group, err: fmt.Errorf("%s: a command is required", group), usage: groupUsage}
	case isHelp(args[0]):
		fmt.Fprint(c.out, groupUsage)
		return "", nil, flag.ErrHelp
	}
	sub := cmp.Or(aliases[group][args[0]], args[0])
	if !slices.Contains(subs, sub) {
		return "", nil, usageErrorf("tock "+group, "%s: unknown command %q", group, args[0])
	}
	return sub, args[1:], nil
}

func runJobs(ctx context.Context, c *cli, args []string) error {
	sub, args, err := subcommand(c, "jobs", jobsUsage, args, "create", "get", "ls", "patch", "cancel", "pause", "resume", "trigger", "delete", "runs", "bulk")
	if err != nil {
		return err
	}
	a := c.newAPICmd("jobs " + sub)
	defer a.close()
	switch sub {
	case "create":
		return a.jobsCreate(ctx, args)
	case "get":
		if err := a.parse(args, 1, "a job id"); err != nil {
			return err
		}
		j, err := a.client.GetJob(ctx, a.args[0])
		if err != nil {
			return err
		}
		if a.asJSON {
			return a.printJSON(j)
		}
		return a.printJob(j, a.nextAttempt(ctx, j))
	case "ls":
		return a.jobsList(ctx, args)
	case "patch":
		return a.jobsPatch(ctx, args)
	case "cancel", "pause", "resume", "delete":
		if err := a.parse(args, -1, "a job id"); err != nil {
			return err
		}
		action := map[string]func(context.Context, string) (ingest.StateReply, error){
			"cancel": a.client.CancelJob, "pause": a.client.PauseJob, "resume": a.client.ResumeJob,
			"delete": a.client.DeleteJob,
		}[sub]
		return a.stateActions(ctx, "ID", action)
	case "trigger":
		if err := a.parse(args, -1, "a job id"); err != nil {
			return err
		}
		var replies []ingest.TriggerReply
		for _, id := range a.args {
			r, err := a.client.TriggerJob(ctx, id)
			if err != nil {
				a.flushTrigger(replies)
				return fmt.Errorf("trigger %s: %w", id, err)
			}
			replies = append(replies, r)
		}
		return a.flushTrigger(replies)
	case "bulk":
		return a.bulk(ctx, args, false)
	case "runs":
		if err := a.parse(args, 1, "a job id"); err != nil {
			return err
		}
		rl, err := a.client.Runs(ctx, a.args[0])
		if err != nil {
			return err
		}
		if a.asJSON {
			return a.printJSON(rl)
		}
		return a.printRuns(rl.Runs)
	}
	return nil
}

func (a *apiCmd) flushTrigger(rs []ingest.TriggerReply) error {
	if a.asJSON {
		if len(a.args) == 1 && len(rs) == 1 {
			return a.printJSON(rs[0])
		}
		return a.printJSON(rs)
	}
	if len(rs) == 0 {
		return nil
	}
	tw := a.table()
	fmt.Fprintln(tw, "ID\tRUN")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\n", r.ID, r.Run)
	}
	return tw.Flush()
}

// stateActions applies action to every argument and prints the replies; it stops at the
// first error (after printing what succeeded).
func (a *apiCmd) stateActions(ctx context.Context, head string, action func(context.Context, string) (ingest.StateReply, error)) error {
	var replies []ingest.StateReply
	var err error
	for _, name := range a.args {
		var r ingest.StateReply
		if r, err = action(ctx, name); err != nil {
			err = fmt.Errorf("%s %s: %w", strings.TrimPrefix(a.fs.Name(), "tock "), name, err)
			break
		}
		replies = append(replies, r)
	}
	if a.asJSON {
		if len(a.args) == 1 && len(replies) == 1 {
			return errors.Join(a.printJSON(replies[0]), err)
		}
		if replies == nil {
			replies = []ingest.StateReply{}
		}
		return errors.Join(a.printJSON(replies), err)
	}
	if len(replies) > 0 {
		tw := a.table()
		fmt.Fprintf(tw, "%s\tSTATE\tCHANGED\n", head)
		for _, r := range replies {
			fmt.Fprintf(tw, "%s\t%s\t%v\n", r.ID, r.State, r.Changed)
		}
		if ferr := tw.Flush(); ferr != nil {
			return errors.Join(ferr, err)
		}
	}
	return err
}

// jobFlags are the flags that describe a job, shared by create and patch.
type jobFlags struct {
	id, queue, typ                   string
	payload, payloadFile, payloadB64 string
	at, delay, cron, tz              string
	now                              bool
	priority, maxAttempts            int
	initialBackoff, maxBackoff       string
	timeout, visibility              string
	overlap, misfire, misfireAfter   string
	idempotencyKey, file             string
	dryRun                           bool
	set                              map[string]bool // flags given on the command line
}

func (f *jobFlags) register(fs *flag.FlagSet, create bool) {
	if create {
		fs.StringVar(&f.id, "id", "", "job id, the idempotency key (default: generated)")
		fs.StringVar(&f.queue, "queue", "", "queue (default: default)")
		fs.StringVar(&f.typ, "type", "", "job type: the handler's name (required)")
		fs.StringVar(&f.timeout, "timeout", "", "bound of one attempt, a Go duration (default 30m)")
		fs.StringVar(&f.visibility, "visibility", "", "a claimed run without heartbeat goes to another worker after this (default 30s)")
		fs.StringVar(&f.overlap, "overlap", "", "recurring jobs: skip, allow or buffer_one (default skip)")
		fs.StringVar(&f.misfire, "misfire", "", "recurring jobs: run_once, skip or run_all (default run_once)")
		fs.StringVar(&f.misfireAfter, "misfire-after", "", "lateness beyond which a run is a misfire (default 60s)")
		fs.StringVar(&f.idempotencyKey, "idempotency-key", "", "sent as the Idempotency-Key header")
		fs.StringVar(&f.file, "file", "", "read the job (a JSON JobRequest, or an array of them for a batch) from this file; - is stdin")
		fs.BoolVar(&f.dryRun, "dry-run", false, "create nothing: print the next 10 fire times of --cron in --tz, marking daylight-saving moves")
	}
	fs.StringVar(&f.payload, "payload", "", "payload as JSON text, e.g. '{\"user\":42}' or '\"text\"'")
	fs.StringVar(&f.payloadFile, "payload-file", "", "payload bytes from a file (sent as JSON when they are JSON, base64 otherwise)")
	fs.StringVar(&f.payloadB64, "payload-base64", "", "payload bytes, base64 encoded")
	fs.StringVar(&f.at, "at", "", "fire once at this RFC 3339 time")
	fs.StringVar(&f.delay, "delay", "", "fire once after this Go duration (90s, 1h30m)")
	fs.BoolVar(&f.now, "now", false, "fire once, now")
	fs.StringVar(&f.cron, "cron", "", "fire at every occurrence of a cron expression (5 fields, 6 with seconds, @hourly...)")
	fs.StringVar(&f.tz, "tz", "", "IANA time zone of --cron (default UTC)")
	fs.IntVar(&f.priority, "priority", 0, "0-9, 9 most urgent (default 5)")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts before the run goes to the dead-letter set (default 25)")
	fs.StringVar(&f.initialBackoff, "initial-backoff", "", "first retry delay (default 1s)")
	fs.StringVar(&f.maxBackoff, "max-backoff", "", "longest retry delay (default 1h)")
}

// collectSet records which flags were given.
func (f *jobFlags) collectSet(fs *flag.FlagSet) {
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
}

func (f *jobFlags) schedule() (ingest.Schedule, bool) {
	s := ingest.Schedule{At: f.at, Delay: f.delay, Now: f.now, Cron: f.cron, Timezone: f.tz}
	return s, f.set["at"] || f.set["delay"] || f.set["now"] || f.set["cron"] || f.set["tz"]
}

// payloadFields returns the payload the flags give: JSON text, or base64 bytes.
func (f *jobFlags) payloadFields(in io.Reader) (json.RawMessage, *string, error) {
	n := 0
	for _, k := range []string{"payload", "payload-file", "payload-base64"} {
		if f.set[k] {
			n++
		}
	}
	if n > 1 {
		return nil, nil, errors.New("--payload, --payload-file and --payload-base64 exclude each other")
	}
	switch {
	case f.set["payload"]:
		if !json.Valid([]byte(f.payload)) {
			return nil, nil, errors.New(`--payload: not valid JSON (quote text as '"text"', or use --payload-file for raw bytes)`)
		}
		return json.RawMessage(f.payload), nil, nil
	case f.set["payload-file"]:
		b, err := readFileOrStdin(f.payloadFile, in)
		if err != nil {
			return nil, nil, fmt.Errorf("--payload-file: %w", err)
		}
		if len(b) > 0 && json.Valid(b) {
			return json.RawMessage(bytes.TrimSpace(b)), nil, nil
		}
		s := base64.StdEncoding.EncodeToString(b)
		return nil, &s, nil
	case f.set["payload-base64"]:
		if _, err := base64.StdEncoding.DecodeString(f.payloadB64); err != nil {
			return nil, nil, fmt.Errorf("--payload-base64: %w", err)
		}
		s := f.payloadB64
		return nil, &s, nil
	}
	return nil, nil, nil
}

func (f *jobFlags) retry() *ingest.Retry {
	if !f.set["max-attempts"] && !f.set["initial-backoff"] && !f.set["max-backoff"] {
		return nil
	}
	return &ingest.Retry{MaxAttempts: f.maxAttempts, InitialBackoff: f.initialBackoff, MaxBackoff: f.maxBackoff}
}

// checkDurations refuses durations too long for a duration (see checkDurationFlags).
func (f *jobFlags) checkDurations() error {
	return checkDurationFlags(map[string]string{"delay": f.delay, "timeout": f.timeout, "visibility": f.visibility,
		"initial-backoff": f.initialBackoff, "max-backoff": f.maxBackoff, "misfire-after": f.misfireAfter},
		"delay", "timeout", "visibility", "initial-backoff", "max-backoff", "misfire-after")
}

func (f *jobFlags) request(in io.Reader) (ingest.JobRequest, error) {
	req := ingest.JobRequest{ID: f.id, Queue: f.queue, Type: f.typ, Timeout: f.timeout, Visibility: f.visibility,
		Overlap: f.overlap, Misfire: f.misfire, MisfireAfter: f.misfireAfter, Retry: f.retry()}
	if f.typ == "" {
		return req, errors.New("--type is required (or --file)")
	}
	s, ok := f.schedule()
	if !ok {
		return req, errors.New("a schedule is required: --at, --delay, --now or --cron")
	}
	if err := f.checkDurations(); err != nil {
		return req, err
	}
	req.Schedule = s
	p, b64, err := f.payloadFields(in)
	if err != nil {
		return req, err
	}
	req.Payload = p
	if b64 != nil {
		req.PayloadBase64 = *b64
	}
	if f.set["priority"] {
		req.Priority = &f.priority
	}
	return req, nil
}

// flagsError is the error of the command for an error of its job flags: a usage error,
// but for a file that could not be read.
func (a *apiCmd) flagsError(err error) error {
	if _, ok := errors.AsType[*fs.PathError](err); ok {
		return fmt.Errorf("%s: %w", strings.TrimPrefix(a.fs.Name(), "tock "), err)
	}
	return a.usageErrorf("%w", err)
}

func readFileOrStdin(name string, in io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(in)
	}
	return os.ReadFile(name)
}

func (a *apiCmd) jobsCreate(ctx context.Context, args []string) error {
	var f jobFlags
	f.register(a.fs, true)
	if err := a.parse(args, 0, ""); err != nil {
		return err
	}
	f.collectSet(a.fs)
	if f.dryRun {
		return a.dryRun(ctx, &f)
	}
	if f.set["file"] {
		for k := range f.set {
			switch k {
			case "file", "api", "token", "json", "idempotency-key":
			default:
				return a.usageErrorf("--file excludes --%s: put it in the file", k)
			}
		}
		return a.createFromFile(ctx, f.file, f.idempotencyKey)
	}
	req, err := f.request(a.in)
	if err != nil {
		return a.flagsError(err)
	}
	return a.createOne(ctx, req, f.idempotencyKey)
}

// dryRun prints the fire times a --cron schedule would have (GET /v1/schedules:preview),
// with the daylight-saving note of each.
func (a *apiCmd) dryRun(ctx context.Context, f *jobFlags) error {
	switch {
	case f.set["file"]:
		return a.usageErrorf("--dry-run previews the --cron flag, not a --file")
	case !f.set["cron"]:
		return a.usageErrorf("--dry-run previews a --cron schedule (with --tz): give --cron")
	}
	p, err := a.client.PreviewSchedule(ctx, f.cron, f.tz, 0, time.Time{})
	if err != nil {
		return err
	}
	if a.asJSON {
		return a.printJSON(p)
	}
	fmt.Fprintf(a.errOut, "dry run: nothing created; next fire times of %q in %s\n", p.Cron, p.Timezone)
	loc, err := time.LoadLocation(p.Timezone)
	if err != nil {
		loc = nil // the offsets as sent, without zone names
	}
	tw := a.table()
	fmt.Fprintln(tw, "FIRES AT\tDAYLIGHT SAVING")
	for _, fr := range p.Fires {
		if loc != nil {
			fr.At = fr.At.In(loc)
		}
		note := "-"
		if fr.DST != "" {
			note = fr.DST + ": " + fr.Note
		}
		fmt.Fprintf(tw, "%s\t%s\n", fr.At.Format("2006-01-02 15:04:05 MST (-07:00)"), note)
	}
	return tw.Flush()
}

func (a *apiCmd) createOne(ctx context.Context, req ingest.JobRequest, key string) error {
	j, created, err := a.client.CreateJob(ctx, req, key)
	if err != nil {
		return err
	}
	if a.asJSON {
		return a.printJSON(j)
	}
	tw := a.table()
	fmt.Fprintln(tw, "ID\tQUEUE\tTYPE\tSTATE\tNEXT RUN\tRESULT")
	result := "created"
	if !created {
		result = "exists"
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Queue, j.Type, j.State, a.timeOrDash(j.NextRunAt), result)
	return tw.Flush()
}

func (a *apiCmd) createFromFile(ctx context.Context, name, key string) error {
	b, err := readFileOrStdin(name, a.in)
	if err != nil {
		return fmt.Errorf("jobs create: --file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		if key != "" {
			return a.usageErrorf("--idempotency-key applies to one job, not a batch (give each job an id)")
		}
		var reqs []ingest.JobRequest
		if err := ingest.DecodeRequest(b, &reqs); err != nil {
			return fmt.Errorf("jobs create: --file %s: %w", name, err)
		}
		return a.createBatch(ctx, reqs)
	}
	var req ingest.JobRequest
	if err := ingest.DecodeRequest(b, &req); err != nil {
		return fmt.Errorf("jobs create: --file %s: %w", name, err)
	}
	return a.createOne(ctx, req, key)
}

func (a *apiCmd) createBatch(ctx context.Context, reqs []ingest.JobRequest) error {
	r, err := a.client.CreateBatch(ctx, reqs)
	if err != nil {
		return err
	}
	if a.asJSON {
		err = a.printJSON(r)
	} else {
		tw := a.table()
		fmt.Fprintln(tw, "#\tSTATUS\tID\tSTATE\tNEXT RUN\tERROR")
		for i, res := range r.Results {
			id, state, next, msg := "-", "-", "-", ""
			if res.Job != nil {
				id, state, next = res.Job.ID, res.Job.State, a.timeOrDash(res.Job.NextRunAt)
			}
			if res.Error != nil {
				msg = (&ingest.APIError{Status: res.Status, Detail: *res.Error}).Error()
				if i < len(reqs) && reqs[i].ID != "" {
					id = reqs[i].ID
				}
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\n", i, res.Status, id, state, next, msg)
		}
		err = tw.Flush()
		fmt.Fprintf(a.out, "created %d, existing %d, failed %d\n", r.Created, r.Existing, r.Failed)
	}
	if err == nil && r.Failed > 0 {
		err = fmt.Errorf("jobs create: %d of %d jobs failed", r.Failed, len(reqs))
	}
	return err
}

func (a *apiCmd) jobsPatch(ctx context.Context, args []string) error {
	var f jobFlags
	f.register(a.fs, false)
	if err := a.parse(args, 1, "a job id"); err != nil {
		return err
	}
	f.collectSet(a.fs)
	if err := f.checkDurations(); err != nil {
		return a.flagsError(err)
	}
	var p ingest.JobPatch
	if s, ok := f.schedule(); ok {
		p.Schedule = &s
	}
	var err error
	if p.Payload, p.PayloadBase64, err = f.payloadFields(a.in); err != nil {
		return a.flagsError(err)
	}
	if f.set["priority"] {
		p.Priority = &f.priority
	}
	p.Retry = f.retry()
	if p.Schedule == nil && p.Payload == nil && p.PayloadBase64 == nil && p.Priority == nil && p.Retry == nil {
		return a.usageErrorf("nothing to change (give --payload, a schedule, --priority or a retry flag)")
	}
	j, err := a.client.PatchJob(ctx, a.args[0], p)
	if err != nil {
		return err
	}
	if a.asJSON {
		return a.printJSON(j)
	}
	return a.printJob(j, a.nextAttempt(ctx, j))
}

func (a *apiCmd) jobsList(ctx context.Context, args []string) error {
	var queue, state, cursor string
	var limit int
	var all bool
	a.fs.StringVar(&queue, "queue", "", "only this queue")
	a.fs.StringVar(&state, "state", "", "only this state (scheduled, ready, running, retrying, paused, completed, dead, cancelled)")
	a.fs.IntVar(&limit, "limit", 0, "jobs per page (default: the server's, 100)")
	a.fs.StringVar(&cursor, "cursor", "", "continue a listing from its next_cursor")
	a.fs.BoolVar(&all, "all", false, "follow the cursors to the end of the listing")
	if err := a.parse(args, 0, ""); err != nil {
		return err
	}
	var jobs []ingest.Job
	for {
		l, err := a.client.ListJobs(ctx, queue, state, limit, cursor)
		if err != nil {
			return err
		}
		jobs = append(jobs, l.Jobs...)
		cursor = l.NextCursor
		if !all || cursor == "" {
			break
		}
	}
	if a.asJSON {
		if jobs == nil {
			jobs = []ingest.Job{}
		}
		return a.printJSON(ingest.JobList{Jobs: jobs, NextCursor: cursor})
	}
	tw := a.table()
	fmt.Fprintln(tw, "ID\tQUEUE\tTYPE\tSTATE\tSCHEDULE\tNEXT RUN\tPRIORITY")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", j.ID, j.Queue, j.Type, j.State, scheduleText(j.Schedule), a.nextRunText(j), j.Priority)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if cursor != "" {
		fmt.Fprintf(a.errOut, "more jobs follow: --cursor %s (or --all)\n", cursor)
	} else if len(jobs) == 0 {
		fmt.Fprintln(a.errOut, "no jobs")
	}
	return nil
}

// nextRunText is the NEXT RUN of a job in a listing: the earlier of its next occurrence
// and the due time of a run waiting for a retry, marked "(retry)".
func (a *apiCmd) nextRunText(j ingest.Job) string {
	if j.RetryAt != nil && (j.NextRunAt == nil || j.RetryAt.Before(*j.NextRunAt)) {
		return a.timeText(*j.RetryAt) + " (retry)"
	}
	return a.timeOrDash(j.NextRunAt)
}

// nextAttempt describes the attempt that job j waits for, when a run waits for a retry:
// its due time and, from the run history, its number. "" when no run waits.
func (a *apiCmd) nextAttempt(ctx context.Context, j ingest.Job) string {
	if j.RetryAt == nil {
		return ""
	}
	s := a.timeText(*j.RetryAt)
	// The newest attempt of the history that failed or snoozed is the one the retry
	// follows; a snooze does not use up an attempt.
	if rl, err := a.client.Runs(ctx, j.ID); err == nil {
		for _, r := range rl.Runs {
			switch r.Outcome {
			case "failed", "lost":
				return fmt.Sprintf("%s (attempt %d of %d)", s, r.Attempt+1, j.Retry.MaxAttempts)
			case "snoozed":
				return fmt.Sprintf("%s (attempt %d of %d, after a snooze)", s, r.Attempt, j.Retry.MaxAttempts)
			}
		}
	}
	return s
}

// printJob prints job j as rows; next, when set, is the attempt a retrying run waits for.
func (a *apiCmd) printJob(j ingest.Job, next string) error {
	tw := a.table()
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("id", j.ID)
	row("queue", j.Queue)
	row("type", j.Type)
	row("state", j.State)
	row("schedule", scheduleText(j.Schedule))
	row("next run", a.timeOrDash(j.NextRunAt))
	if next != "" {
		row("next attempt", next)
	}
	row("active runs", strconv.Itoa(j.ActiveRuns))
	row("priority", strconv.Itoa(j.Priority))
	r := j.Retry
	retry := fmt.Sprintf("max %d attempts, backoff %s to %s", r.MaxAttempts, orDash(r.InitialBackoff), orDash(r.MaxBackoff))
	if r.Multiplier != nil {
		retry += fmt.Sprintf(" ×%g", *r.Multiplier)
	}
	if r.Jitter != nil {
		retry += fmt.Sprintf(", jitter %g", *r.Jitter)
	}
	row("retry", retry)
	row("timeout", orDash(j.Timeout))
	row("visibility", orDash(j.Visibility))
	if j.Schedule.Cron != "" {
		row("overlap", orDash(j.Overlap))
		misfire := orDash(j.Misfire)
		if j.MisfireAfter != "" {
			misfire += " after " + j.MisfireAfter
		}
		row("misfire", misfire)
	}
	row("shard", strconv.Itoa(j.Shard))
	row("created", a.timeOrDash(j.CreatedAt))
	if j.ExpiresAt != nil {
		row("expires", a.timeOrDash(j.ExpiresAt))
	}
	switch {
	case j.Payload != nil:
		row("payload", shorten(string(j.Payload), 200))
	case j.PayloadBase64 != "":
		row("payload", "base64 "+shorten(j.PayloadBase64, 200))
	default:
		row("payload", "-")
	}
	return tw.Flush()
}

func (a *apiCmd) printRuns(runs []ingest.Run) error {
	if len(runs) == 0 {
		fmt.Fprintln(a.errOut, "no runs yet")
		return nil
	}
	tw := a.table()
	fmt.Fprintln(tw, "DUE\tSTARTED\tTOOK\tWORKER\tATTEMPT\tOUTCOME\tERROR")
	for _, r := range runs {
		took := "-"
		if r.Start != nil && r.End != nil {
			took = r.End.Sub(*r.Start).Round(100 * time.Microsecond).String()
		}
		outcome := r.Outcome
		if r.Missed > 0 {
			outcome += fmt.Sprintf(" (%d missed)", r.Missed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", a.timeText(r.Due), a.timeOrDash(r.Start), took, orDash(r.Worker),
			r.Attempt, outcome, shorten(r.Error, 80))
	}
	return tw.Flush()
}

func runDead(ctx context.Context, c *cli, args []string) error {
	sub, args, err := subcommand(c, "dead", deadUsage, args, "ls", "requeue", "rm", "bulk")
	if err != nil {
		return err
	}
	a := c.newAPICmd("dead " + sub)
	defer a.close()
	switch sub {
	case "ls":
		var queue, cursor string
		var limit int
		var all bool
		a.fs.StringVar(&queue, "queue", "", "only this queue")
		a.fs.IntVar(&limit, "limit", 0, "runs per page (default: the server's, 100)")
		a.fs.StringVar(&cursor, "cursor", "", "continue a listing from its next_cursor")
		a.fs.BoolVar(&all, "all", false, "follow the cursors to the end of the listing")
		if err := a.parse(args, 0, ""); err != nil {
			return err
		}
		var dead []ingest.DeadRun
		for {
			l, err := a.client.ListDead(ctx, queue, limit, cursor)
			if err != nil {
				return err
			}
			dead = append(dead, l.Dead...)
			cursor = l.NextCursor
			if !all || cursor == "" {
				break
			}
		}
		if a.asJSON {
			if dead == nil {
				dead = []ingest.DeadRun{}
			}
			return a.printJSON(ingest.DeadList{Dead: dead, NextCursor: cursor})
		}
		tw := a.table()
		fmt.Fprintln(tw, "RUN\tQUEUE\tTYPE\tATTEMPTS\tDUE\tDIED\tERROR")
		for _, d := range dead {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Run, d.Queue, d.Type, d.Attempts, a.timeText(d.Due), a.timeText(d.DiedAt), shorten(d.Error, 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if cursor != "" {
			fmt.Fprintf(a.errOut, "more dead runs follow: --cursor %s (or --all)\n", cursor)
		} else if len(dead) == 0 {
			fmt.Fprintln(a.errOut, "no dead runs")
		}
		return nil
	case "requeue":
		if err := a.parse(args, -1, "a run (<job id>:<due ms>)"); err != nil {
			return err
		}
		return a.stateActions(ctx, "ID", a.client.RequeueDead)
	case "rm":
		if err := a.parse(args, -1, "a run (<job id>:<due ms>)"); err != nil {
			return err
		}
		return a.stateActions(ctx, "ID", a.client.DeleteDead)
	case "bulk":
		return a.bulk(ctx, args, true)
	}
	return nil
}

func isHelp(s string) bool { return s == "help" || s == "-h" || s == "--help" || s == "-help" }

func scheduleText(s ingest.Schedule) string {
	switch {
	case s.Cron != "":
		tz := s.Timezone
		if tz == "" {
			tz = "UTC"
		}
		return fmt.Sprintf("cron %q %s", s.Cron, tz)
	case s.At != "":
		return "at " + s.At
	case s.Delay != "":
		return "delay " + s.Delay
	case s.Now:
		return "now"
	}
	return "-"
}

func (a *apiCmd) timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(a.location()).Format("2006-01-02 15:04:05.000")
}

func (a *apiCmd) timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return a.timeText(*t)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shorten cuts s to n runes on one line.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
