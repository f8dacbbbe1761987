package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/rueidis"

	"github.com/tockhq/tock/job"
)

// maxCreateBatch bounds the jobs one create_jobs call carries.
const maxCreateBatch = 500

// CreateResult is the outcome of creating one job.
type CreateResult struct {
	ID        string
	Shard     ID
	State     job.State
	NextRunAt time.Time // zero when the run is ready already
	// Created is false when the id existed; the other fields then describe the existing job.
	Created bool
	// Conflict is set with Created false when the existing job's definition differs from
	// the one given.
	Conflict bool
	// Err is a *job.FieldError for an invalid job, or the Redis error that prevented
	// the create, or a *ReplicationError when the job's shard was not confirmed by
	// Config.Durability's replicas in time (the other fields then say what the primary
	// did).
	Err error
}

type encodedJob struct {
	idx   int
	shard ID
	kind  string
	when  string
	queue string
	pri   string
	def   []string // field/value pairs that differ from fieldDefaults
	dh    string
	cron  *job.Cron
}

// Job hash fields and the defaults that are not stored (the scripts and decodeInfo
// apply them): a job hash holds only what differs, which keeps it small.
var fieldDefaults = map[string]string{
	"q": job.DefaultQueue, "pr": strconv.Itoa(job.DefaultPriority), "sk": "at",
	"ma": strconv.Itoa(job.DefaultMaxAttempts), "ib": "1000", "mb": "3600000", "mu": "2", "ji": "0.2",
	"to": strconv.FormatInt(job.DefaultTimeout.Milliseconds(), 10),
	"vt": strconv.FormatInt(job.DefaultVisibility.Milliseconds(), 10),
	"ov": string(job.OverlapSkip), "mf": string(job.MisfireRunOnce),
	"mt": strconv.FormatInt(job.DefaultMisfireAfter.Milliseconds(), 10),
}

// encode turns a normalised job into create_jobs arguments.
func encode(j *job.Job) (*encodedJob, error) {
	e := &encodedJob{queue: j.Queue, pri: strconv.Itoa(j.PriorityOrDefault())}
	sch := j.Schedule
	all := []string{
		"q", j.Queue, "t", j.Type, "p", string(j.Payload), "pr", e.pri,
		"ma", strconv.Itoa(j.Retry.MaxAttempts),
		"ib", strconv.FormatInt(j.Retry.InitialBackoff.Milliseconds(), 10),
		"mb", strconv.FormatInt(j.Retry.MaxBackoff.Milliseconds(), 10),
		"mu", strconv.FormatFloat(j.Retry.Multiplier, 'g', -1, 64),
		"ji", strconv.FormatFloat(j.Retry.Jitter, 'g', -1, 64),
		"to", strconv.FormatInt(j.Timeout.Milliseconds(), 10),
		"vt", strconv.FormatInt(j.Visibility.Milliseconds(), 10),
	}
	if j.Target != nil {
		all = append(all, "tg", encodeTarget(j.Target))
	}
	switch {
	case sch.IsRecurring():
		c, err := job.ParseCron(sch.Cron, sch.TimeZone)
		if err != nil {
			return nil, &job.FieldError{Field: "schedule.cron", Msg: err.Error()}
		}
		e.kind, e.cron = "cron", c
		all = append(all, "sk", "cron", "sc", sch.Cron, "tz", sch.TimeZone, "ov", string(j.Overlap),
			"mf", string(j.Misfire), "mt", strconv.FormatInt(j.MisfireAfter.Milliseconds(), 10), "ver", "1")
	case !sch.At.IsZero():
		e.kind, e.when = "at", strconv.FormatInt(sch.At.UnixMilli(), 10)
		all = append(all, "sv", "@"+e.when)
	case sch.Delay > 0:
		e.kind, e.when = "delay", strconv.FormatInt(sch.Delay.Milliseconds(), 10)
		all = append(all, "sv", "+"+e.when)
	default:
		e.kind, e.when = "delay", "0"
		all = append(all, "sv", "now")
	}
	h := xxhash.New()
	for _, f := range all {
		_, _ = h.WriteString(f)
		_, _ = h.Write([]byte{0})
	}
	e.dh = strconv.FormatUint(h.Sum64(), 36)
	for k := 0; k < len(all); k += 2 {
		if d, ok := fieldDefaults[all[k]]; ok && d == all[k+1] {
			continue
		}
		if all[k+1] == "" && all[k] != "t" {
			continue
		}
		if all[k] == "p" {
			e.def = appendPayload(e.def, all[k+1])
			continue
		}
		e.def = append(e.def, all[k], all[k+1])
	}
	return e, nil
}

// Redis keeps a hash as a compact listpack while every value is at most 64 bytes
// (hash-max-listpack-value, default 64) and as a hash table, about twice the size,
// otherwise. A payload of up to payloadChunks*payloadChunk bytes is therefore stored in
// fields p, p1, p2, … of at most payloadChunk bytes each (claim_runs and decodeInfo join
// them); a longer one is stored whole in p.
const (
	payloadChunk  = 64
	payloadChunks = 8
)

func appendPayload(def []string, p string) []string {
	if len(p) > payloadChunk*payloadChunks {
		return append(def, "p", p)
	}
	for i := 0; len(p) > 0; i++ {
		n := min(len(p), payloadChunk)
		f := "p"
		if i > 0 {
			f = "p" + strconv.Itoa(i)
		}
		def = append(def, f, p[:n])
		p = p[n:]
	}
	return def
}

// joinPayload reassembles a payload stored by appendPayload.
func joinPayload(m map[string]string) []byte {
	b := []byte(m["p"])
	for i := 1; i < payloadChunks; i++ {
		c, ok := m["p"+strconv.Itoa(i)]
		if !ok {
			break
		}
		b = append(b, c...)
	}
	return b
}

// Create stores jobs whose ids are new and files their first runs; a job whose id exists
// is left as it is and reported with Created false (ids are idempotency keys). Jobs are
// normalised in place (defaults filled, ids generated). Jobs are grouped by shard and
// sent in one pipeline. The results are in the order of jobs; invalid jobs get a
// *job.FieldError and are not stored. The error is the first Redis error, if any; the
// results then say which jobs it hit.
//
// The type job.WorkflowType is refused (a *job.FieldError naming "type"): it is a
// scheduled workflow's definition's, whose runs start workflow instances, and only
// CreateWorkflow creates one, after checking the workflow.
func (s *Store) Create(ctx context.Context, jobs []*job.Job) ([]CreateResult, error) {
	return s.createJobs(ctx, jobs, s.cfg.MaxPayload, false)
}

// createJobs is Create with jobs' payloads bounded by maxPayload: the job limit, or a
// scheduled workflow's definition's (createDefinition, which passes definition true:
// its job has the type job.WorkflowType).
func (s *Store) createJobs(ctx context.Context, jobs []*job.Job, maxPayload int, definition bool) ([]CreateResult, error) {
	results := make([]CreateResult, len(jobs))
	byShard := map[ID][]*encodedJob{}
	var est time.Time
	for i, j := range jobs {
		if err := j.Normalize(maxPayload); err != nil {
			results[i] = CreateResult{ID: j.ID, Err: err}
			continue
		}
		if j.Type == job.WorkflowType && !definition {
			results[i] = CreateResult{ID: j.ID, Err: &job.FieldError{Field: "type",
				Msg: fmt.Sprintf("%q is reserved for scheduled workflows' definitions: create one with a workflow and its schedule", job.WorkflowType)}}
			continue
		}
		e, err := encode(j)
		if err != nil {
			results[i] = CreateResult{ID: j.ID, Err: err}
			continue
		}
		e.idx, e.shard = i, s.ShardOf(j.ID)
		results[i] = CreateResult{ID: j.ID, Shard: e.shard}
		if e.cron != nil {
			if est.IsZero() {
				if est, err = s.ServerNow(ctx); err != nil {
					return results, err
				}
			}
			if e.when, err = candidates(e.cron, est); err != nil {
				results[i].Err = &job.FieldError{Field: "schedule.cron", Msg: err.Error()}
				continue
			}
		}
		byShard[e.shard] = append(byShard[e.shard], e)
	}
	firstErr := s.create(ctx, byShard, jobs, results)
	// A cron candidate list that missed the server's now means the clock estimate was off:
	// measure again and retry those jobs once.
	retry := map[ID][]*encodedJob{}
	for id, es := range byShard {
		for _, e := range es {
			if errors.Is(results[e.idx].Err, ErrClockSkew) {
				retry[id] = append(retry[id], e)
			}
		}
	}
	if len(retry) > 0 && (firstErr == nil || errors.Is(firstErr, ErrNotReplicated)) {
		if err := s.measureClock(ctx); err != nil {
			return results, err
		}
		est, _ = s.ServerNow(ctx)
		for _, es := range retry {
			for _, e := range es {
				e.when, _ = candidates(e.cron, est)
				results[e.idx].Err = nil
			}
		}
		if err := s.create(ctx, retry, jobs, results); firstErr == nil {
			firstErr = err
		}
	}
	return results, firstErr
}

func (s *Store) create(ctx context.Context, byShard map[ID][]*encodedJob, jobs []*job.Job, results []CreateResult) error {
	var calls []call
	var groups [][]*encodedJob
	for id, es := range byShard {
		for len(es) > 0 {
			n := min(len(es), maxCreateBatch)
			chunk := es[:n]
			es = es[n:]
			args := []string{s.keys.Prefix(id), strconv.FormatInt(s.bucketMs, 10), strconv.Itoa(len(chunk)), s.cfg.coldMs(), s.cfg.packArg()}
			for _, e := range chunk {
				args = append(args, jobs[e.idx].ID, e.kind, e.when, e.queue, e.pri, e.dh, strconv.Itoa(len(e.def)/2))
				args = append(args, e.def...)
			}
			calls = append(calls, call{s.scripts.CreateJobs, []string{s.keys.Buckets(id)}, args})
			groups = append(groups, chunk)
		}
	}
	var firstErr error
	var msgs [][2]string
	res, replErrs := s.execReplicated(ctx, calls...)
	for k, r := range res {
		chunk := groups[k]
		id := chunk[0].shard
		reply, err := r.ToArray()
		if err == nil && len(reply) != 3 {
			err = fmt.Errorf("create_jobs: unexpected reply of %d entries", len(reply))
		}
		if err != nil {
			err = fmt.Errorf("create jobs on shard %d: %w", id, err)
			if firstErr == nil {
				firstErr = err
			}
			for _, e := range chunk {
				results[e.idx].Err = err
			}
			continue
		}
		if wake := i64(reply[0]); wake > 0 {
			msgs = append(msgs, s.wakeSignal(id, wake))
		}
		msgs = s.readySignals(msgs, id, strs(reply[1]))
		items := arr(reply[2])
		for n, e := range chunk {
			res := &results[e.idx]
			status := i64(items[n*4])
			if status < 0 {
				res.Err = codeError(status)
				continue
			}
			res.Created = status == 1
			res.State = job.State(str(items[n*4+1]))
			res.NextRunAt = ms(i64(items[n*4+2]))
			res.Conflict = !res.Created && str(items[n*4+3]) != e.dh
		}
		if err := replErrs[k]; err != nil {
			err = fmt.Errorf("create jobs on shard %d: %w", id, err)
			if firstErr == nil {
				firstErr = err
			}
			for _, e := range chunk {
				if results[e.idx].Err == nil {
					results[e.idx].Err = err
				}
			}
		}
	}
	s.publish(ctx, msgs)
	return firstErr
}

// Info is a job as stored: its definition and its current state.
type Info struct {
	job.Job
	Shard     ID
	State     job.State
	NextRunAt time.Time // zero when no occurrence is filed
	CreatedAt time.Time
	// ActiveRuns counts runs that are ready, running, waiting for a retry or parked.
	ActiveRuns int
	// RetryAt is when the earliest of the job's runs that waits for a retry (or a
	// snooze) is due again; zero when none waits.
	RetryAt time.Time
	// Expires is when a finished job will be removed (zero when it is kept).
	Expires time.Time
}

// Get returns a job, or ErrNotFound.
func (s *Store) Get(ctx context.Context, jobID string) (*Info, error) {
	if err := job.ValidateRef("id", jobID, job.MaxIDLen); err != nil {
		return nil, err
	}
	id := s.ShardOf(jobID)
	m, exp, err := s.readJob(ctx, id, jobID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("get job %q: %w", jobID, err)
	}
	return infoOf(jobID, id, m, exp), nil
}

// infoOf decodes a job hash m read with its PEXPIRETIME exp.
func infoOf(jobID string, id ID, m map[string]string, exp int64) *Info {
	info := decodeInfo(jobID, m)
	info.Shard = id
	if exp > 0 {
		info.Expires = time.UnixMilli(exp)
	}
	// A run waiting for a retry: "retrying|att|dl|tok|wk|sa|ra|er", ra its due time
	// (common.lua run_pack).
	for _, due := range strings.Split(strings.Trim(m["rl"], ","), ",") {
		if f := strings.SplitN(m["r"+due], "|", 8); len(f) == 8 && f[0] == "retrying" {
			if ra, err := strconv.ParseInt(f[6], 10, 64); err == nil && (info.RetryAt.IsZero() || ra < info.RetryAt.UnixMilli()) {
				info.RetryAt = time.UnixMilli(ra)
			}
		}
	}
	// A one-time job stays 'ready' in Redis while its run runs; its run field tells.
	if info.State == job.StateReady && !info.Schedule.IsRecurring() {
		if due := strings.Trim(m["rl"], ","); due != "" && !strings.Contains(due, ",") {
			if st, _, _ := strings.Cut(m["r"+due], "|"); st == "running" || st == "cancelled" {
				info.State = job.StateRunning
			}
		}
	}
	return info
}

func decodeInfo(jobID string, m map[string]string) *Info {
	for f, d := range fieldDefaults {
		if m[f] == "" {
			m[f] = d
		}
	}
	atoi := func(f string) int64 { v, _ := strconv.ParseInt(m[f], 10, 64); return v }
	atof := func(f string) float64 { v, _ := strconv.ParseFloat(m[f], 64); return v }
	dur := func(f string) time.Duration { return time.Duration(atoi(f)) * time.Millisecond }
	pri := int(atoi("pr"))
	info := &Info{
		Job: job.Job{
			ID: jobID, Queue: m["q"], Type: m["t"], Payload: joinPayload(m), Priority: &pri,
			Retry: job.RetryPolicy{
				MaxAttempts: int(atoi("ma")), InitialBackoff: dur("ib"), MaxBackoff: dur("mb"),
				Multiplier: atof("mu"), Jitter: atof("ji"),
			},
			Timeout: dur("to"), Visibility: dur("vt"),
		},
		State:     job.State(m["st"]),
		NextRunAt: ms(atoi("nx")),
		CreatedAt: ms(atoi("cr")),
	}
	if info.Retry.Jitter == 0 {
		info.Retry.Jitter = -1 // "none", as RetryPolicy spells it
	}
	if tg := m["tg"]; tg != "" {
		info.Target = decodeTarget(tg)
	}
	if m["sk"] == "cron" {
		info.Schedule = job.Schedule{Cron: m["sc"], TimeZone: m["tz"]}
		info.Overlap, info.Misfire = job.Overlap(m["ov"]), job.Misfire(m["mf"])
		info.MisfireAfter = dur("mt")
	} else if sv := m["sv"]; len(sv) > 1 && sv[0] == '@' {
		v, _ := strconv.ParseInt(sv[1:], 10, 64)
		info.Schedule.At = time.UnixMilli(v)
	} else if len(sv) > 1 && sv[0] == '+' {
		v, _ := strconv.ParseInt(sv[1:], 10, 64)
		info.Schedule.Delay = time.Duration(v) * time.Millisecond
	} else {
		info.Schedule.Now = true
	}
	for i := 0; i < len(m["rl"]); i++ {
		if m["rl"][i] == ',' && i > 0 {
			info.ActiveRuns++
		}
	}
	return info
}

// histEntry is a history entry as the scripts write it.
type histEntry struct {
	Due     float64 `json:"d"`
	Start   float64 `json:"s"`
	End     float64 `json:"e"`
	Worker  string  `json:"w"`
	Attempt float64 `json:"a"`
	Outcome string  `json:"o"`
	Error   string  `json:"er"`
	Missed  float64 `json:"m"`
}

// Runs returns the recent runs of a job, newest first (at most Config.History), or
// ErrNotFound when the job does not exist.
func (s *Store) Runs(ctx context.Context, jobID string) ([]job.Run, error) {
	if err := job.ValidateRef("id", jobID, job.MaxIDLen); err != nil {
		return nil, err
	}
	id := s.ShardOf(jobID)
	key := s.keys.Job(id, jobID)
	f, err := s.c.Do(ctx, s.c.B().Hmget().Key(key).Field("st", "h", "hs", "xs").Build()).ToArray()
	if err != nil || len(f) != 4 {
		return nil, fmt.Errorf("runs of job %q: %v", jobID, err)
	}
	h, hs := str(f[1]), str(f[2])
	var packed map[string]string
	if f[0].IsNil() {
		// A cold job has no runs yet; a packed one at most its first.
		if packed, _, err = s.readOtherForms(ctx, id, jobID); err != nil {
			return nil, err
		}
		h, hs = packed["h"], packed["hs"]
	}
	runs, err := decodeHistory(jobID, h)
	if err != nil {
		return nil, err
	}
	// A one-time job that succeeded on the ack's fast path names its run in 'hs' instead
	// of adding an entry to 'h' (finish_runs): that entry is the newest.
	if due := hs; due != "" {
		v, ok := packed["r"+due]
		if !ok {
			if v, err = s.c.Do(ctx, s.c.B().Hget().Key(key).Field("r"+due).Build()).ToString(); err != nil {
				return nil, fmt.Errorf("runs of job %q: run %s: %w", jobID, due, err)
			}
		}
		last, err := succeededRun(due, v)
		if err != nil {
			return nil, fmt.Errorf("runs of job %q: run %s %q: %w", jobID, due, v, err)
		}
		runs = append([]job.Run{last}, runs...)
		if len(runs) > s.cfg.History {
			runs = runs[:s.cfg.History]
		}
	}
	if xs := str(f[3]); xs != "" {
		if err := s.readResults(ctx, key, xs, runs); err != nil {
			return nil, fmt.Errorf("runs of job %q: %w", jobID, err)
		}
	}
	return runs, nil
}

// readResults sets the Result of the succeeded runs among runs whose due times xs lists
// ("d1,d2,", finish_runs' keep_result), from their x<due> fields.
func (s *Store) readResults(ctx context.Context, key, xs string, runs []job.Run) error {
	dues := strings.Split(strings.TrimSuffix(xs, ","), ",")
	fields := make([]string, len(dues))
	for i, d := range dues {
		fields[i] = "x" + d
	}
	vals, err := s.c.Do(ctx, s.c.B().Hmget().Key(key).Field(fields...).Build()).ToArray()
	if err != nil || len(vals) != len(dues) {
		return fmt.Errorf("results: %v", err)
	}
	byDue := make(map[int64][]byte, len(dues))
	for i, d := range dues {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || vals[i].IsNil() {
			continue
		}
		v, _ := vals[i].ToString()
		byDue[n] = []byte(v)
	}
	for i := range runs {
		if r := &runs[i]; r.Outcome == job.OutcomeSucceeded {
			if v, ok := byDue[r.Due.UnixMilli()]; ok {
				r.Result = v
			}
		}
	}
	return nil
}

// succeededRun is the history entry of a run that succeeded on the ack's fast path,
// from its field "succeeded|att|dl||wk|sa|end|er" (run_get in lua/include/common.lua).
func succeededRun(due, v string) (job.Run, error) {
	p := strings.SplitN(v, "|", 8) // the error, last, may hold '|'
	if len(p) != 8 || p[0] != string(job.OutcomeSucceeded) {
		return job.Run{}, errors.New("not a succeeded run")
	}
	d, err1 := strconv.ParseInt(due, 10, 64)
	att, err2 := strconv.Atoi(p[1])
	end, err3 := strconv.ParseInt(p[6], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return job.Run{}, err
	}
	r := job.Run{Due: dueTime(d), End: ms(end), Worker: p[4], Attempt: att, Outcome: job.OutcomeSucceeded}
	if p[5] != "" {
		start, err := strconv.ParseInt(p[5], 10, 64)
		if err != nil {
			return job.Run{}, err
		}
		r.Start = ms(start)
	}
	return r, nil
}

// decodeHistory decodes a job's 'h' field, newest first, one entry per line: a cjson
// object, or a succeeded run as "due,start-due,end-due,worker,attempt" (hist_push in
// lua/include/common.lua).
func decodeHistory(jobID, h string) ([]job.Run, error) {
	if h == "" {
		return []job.Run{}, nil
	}
	lines := strings.Split(h, "\n")
	runs := make([]job.Run, 0, len(lines))
	for _, r := range lines {
		var e histEntry
		var err error
		if strings.HasPrefix(r, "{") {
			err = json.Unmarshal([]byte(r), &e)
		} else {
			e, err = decodeSucceeded(r)
		}
		if err != nil {
			return nil, fmt.Errorf("runs of job %q: decode history entry %q: %w", jobID, r, err)
		}
		var due time.Time
		if e.Due != 0 { // 0 is none: the cancel of a job with no occurrence filed
			due = dueTime(int64(e.Due))
		}
		runs = append(runs, job.Run{
			Due: due, Start: ms(int64(e.Start)), End: ms(int64(e.End)),
			Worker: e.Worker, Attempt: int(e.Attempt), Outcome: job.Outcome(e.Outcome),
			Error: e.Error, Missed: int(e.Missed),
		})
	}
	return runs, nil
}

func decodeSucceeded(r string) (histEntry, error) {
	f := strings.Split(r, ",")
	if len(f) != 5 {
		return histEntry{}, fmt.Errorf("%d fields, want 5", len(f))
	}
	num := func(s string) (float64, error) {
		if s == "" {
			return 0, nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		return float64(v), err
	}
	due, err1 := num(f[0])
	start, err2 := num(f[1])
	end, err3 := num(f[2])
	att, err4 := num(f[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return histEntry{}, err
	}
	e := histEntry{Due: due, End: due + end, Worker: f[3], Attempt: att, Outcome: string(job.OutcomeSucceeded)}
	if f[1] != "" {
		e.Start = due + start
	}
	return e, nil
}

// cancelSignals appends a cancel signal per member of a run that was running.
func (s *Store) cancelSignals(msgs [][2]string, id ID, members []string) [][2]string {
	for _, m := range members {
		msgs = append(msgs, [2]string{s.keys.CancelChannel(), strconv.Itoa(int(id)) + " " + m})
	}
	return msgs
}

func (s *Store) jobArgs(id ID, jobID string) []string {
	return []string{s.keys.Prefix(id), strconv.FormatInt(s.bucketMs, 10), jobID}
}

// Cancel cancels a job: no further occurrences, queued runs removed, running runs told
// to stop (their handlers' contexts are cancelled). Cancelling a job that is already
// finished or cancelled changes nothing and returns its state with changed false.
func (s *Store) Cancel(ctx context.Context, jobID string) (state job.State, changed bool, err error) {
	if err := job.ValidateRef("id", jobID, job.MaxIDLen); err != nil {
		return "", false, err
	}
	id := s.ShardOf(jobID)
	args := append(s.jobArgs(id, jobID), strconv.Itoa(s.cfg.History), strconv.FormatInt(s.cfg.Retention.Milliseconds(), 10))
	r, replErr := s.exec1Replicated(ctx, call{s.scripts.CancelJob, []string{s.keys.Buckets(id), s.keys.Dead(id)}, args})
	reply, err := r.ToArray()
	if err != nil {
		return "", false, fmt.Errorf("cancel job %q: %w", jobID, err)
	}
	if code := i64(reply[0]); code < 0 {
		return "", false, codeError(code)
	}
	msgs := s.cancelSignals(nil, id, strs(reply[2]))
	if len(reply) > 3 {
		msgs = s.readySignals(msgs, id, strs(reply[3]))
	}
	s.publish(ctx, msgs)
	if replErr != nil {
		return "", false, fmt.Errorf("cancel job %q: %w", jobID, replErr)
	}
	return job.State(str(reply[1])), i64(reply[0]) == 1, nil
}

// Delete removes a job and all its runs now, whatever its state (delete_job): nothing is
// kept for the retention, as Cancel keeps a cancelled job. Runs in flight are taken from
// their workers, which are told on the cancel channel; a worker's later report of one is
// refused (ErrTokenMismatch). A scheduled workflow's definition leaves its running
// instances as they are: they keep to its overlap policy until the last one ends, which
// deletes the definition's record of them. ErrNotFound when there is no such job.
func (s *Store) Delete(ctx context.Context, jobID string) error {
	if err := s.refuseNodeJob(ctx, "delete", jobID); err != nil {
		return err
	}
	if err := job.ValidateRef("id", jobID, job.MaxIDLen); err != nil {
		return err
	}
	id := s.ShardOf(jobID)
	keys := []string{s.keys.Buckets(id), s.keys.Dead(id), s.keys.Inflight(id)}
	r, replErr := s.exec1Replicated(ctx, call{s.scripts.DeleteJob, keys, s.jobArgs(id, jobID)})
	reply, err := r.ToArray()
	if err == nil && len(reply) != 2 {
		err = fmt.Errorf("reply of %d values, want 2", len(reply))
	}
	if err != nil {
		return fmt.Errorf("delete job %q: %w", jobID, err)
	}
	if code := i64(reply[0]); code < 0 {
		return codeError(code)
	}
	var msgs [][2]string
	for _, m := range strs(reply[1]) {
		msgs = append(msgs, [2]string{s.keys.CancelChannel(), strconv.Itoa(int(id)) + " " + m})
	}
	s.publish(ctx, msgs)
	if replErr != nil {
		return fmt.Errorf("delete job %q: %w", jobID, replErr)
	}
	return nil
}

// Pause stops a job from starting runs until Resume. Pausing a paused or finished job
// changes nothing (changed false).
func (s *Store) Pause(ctx context.Context, jobID string) (state job.State, changed bool, err error) {
	if err := s.refuseNodeJob(ctx, "pause", jobID); err != nil {
		return "", false, err
	}
	if err := job.ValidateRef("id", jobID, job.MaxIDLen); err != nil {
		return "", false, err
	}
	id := s.ShardOf(jobID)
	r, replErr := s.exec1Replicated(ctx, call{s.scripts.PauseJob, []string{s.keys.Buckets(id)}, s.jobArgs(id, jobID)})
	reply, err := r.ToArray()
	if err != nil {
		return "", false, fmt.Errorf("pause job %q: %w", jobID, err)
	}
	if code := i64(reply[0]); code < 0 {
		return "", false, codeError(code)
	}
	if len(reply) > 2 {
		s.publish(ctx, s.holdSignals(nil, id, strs(reply[2])))
	}
	if replErr != nil {
		return "", false, fmt.Errorf("pause job %q: %w", jobID, replErr)
	}
	return job.State(str(reply[1])), i64(reply[0]) == 1, nil
}

// lfOf returns the latest occurrence a recurring job's dispatcher handled, from its
// field 'lf' as stored; zero when it has none.
func lfOf(lf string) time.Time {
	ms, err := strconv.ParseInt(lf, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Resume undoes Pause. A recurring job continues at its first occurrence after now; a
// one-time job fires at its time (at once when that has passed). Resuming a job that is
// not paused changes nothing (changed false).
func (s *Store) Resume(ctx context.Context, jobID string) (state job.State, changed bool, err error) {
	if err := s.refuseNodeJob(ctx, "resume", jobID); err != nil {
		return "", false, err
	}
	info, err := s.Get(ctx, jobID)
	if err != nil {
		return "", false, err
	}
	id := info.Shard
	for attempt := 0; ; attempt++ {
		cands := ""
		if info.Schedule.IsRecurring() {
			c, err := job.ParseCron(info.Schedule.Cron, info.Schedule.TimeZone)
			if err != nil {
				return "", false, fmt.Errorf("resume job %q: %w", jobID, err)
			}
			est, err := s.ServerNow(ctx)
			if err != nil {
				return "", false, err
			}
			lf, err := s.c.Do(ctx, s.c.B().Hget().Key(s.keys.Job(id, jobID)).Field("lf").Build()).ToString()
			if err != nil && !rueidis.IsRedisNil(err) {
				return "", false, fmt.Errorf("resume job %q: %w", jobID, err)
			}
			if cands, err = candidatesAfter(c, est, lfOf(lf)); err != nil {
				return "", false, fmt.Errorf("resume job %q: %w", jobID, err)
			}
		}
		args := append(s.jobArgs(id, jobID), cands)
		r, replErr := s.exec1Replicated(ctx, call{s.scripts.ResumeJob, []string{s.keys.Buckets(id)}, args})
		reply, err := r.ToArray()
		if err != nil {
			return "", false, fmt.Errorf("resume job %q: %w", jobID, err)
		}
		code := i64(reply[0])
		if code == -4 && attempt == 0 {
			if err := s.measureClock(ctx); err != nil {
				return "", false, err
			}
			continue
		}
		if code < 0 {
			return "", false, codeError(code)
		}
		msgs := s.readySignals(nil, id, strs(reply[3]))
		if wake := i64(reply[4]); wake > 0 {
			msgs = append(msgs, s.wakeSignal(id, wake))
		}
		s.publish(ctx, msgs)
		if replErr != nil {
			return "", false, fmt.Errorf("resume job %q: %w", jobID, replErr)
		}
		return job.State(str(reply[1])), code == 1, nil
	}
}

// Trigger fires a job now, outside its schedule: a recurring job gets an extra run, a
// one-time job that has not fired yet fires now. It returns the new run's member, or a
// *StateError when the job is paused, finished, or a one-time job already under way.
func (s *Store) Trigger(ctx context.Context, jobID string) (member string, err error) {
	if err := s.refuseNodeJob(ctx, "trigger", jobID); err != nil {
		return "", err
	}
	if err := job.ValidateRef("id", jobID, job.MaxIDLen); err != nil {
		return "", err
	}
	id := s.ShardOf(jobID)
	r, replErr := s.exec1Replicated(ctx, call{s.scripts.TriggerJob, []string{s.keys.Buckets(id)}, s.jobArgs(id, jobID)})
	reply, err := r.ToArray()
	if err != nil {
		return "", fmt.Errorf("trigger job %q: %w", jobID, err)
	}
	switch code := i64(reply[0]); {
	case code < 0:
		return "", codeError(code)
	case code == 0:
		return "", &StateError{Op: "trigger", JobID: jobID, State: str(reply[1])}
	}
	s.publish(ctx, s.readySignals(nil, id, []string{str(reply[3])}))
	if replErr != nil {
		return "", fmt.Errorf("trigger job %q: %w", jobID, replErr)
	}
	return str(reply[2]), nil
}

// storedTarget is a job's target as its field 'tg' holds it: compact JSON with short
// names (the timeout in ms). Lua never reads it; the packed and cold forms keep it as
// any other definition field.
type storedTarget struct {
	URL     string            `json:"u"`
	Method  string            `json:"m,omitempty"`
	Headers map[string]string `json:"h,omitempty"`
	Timeout int64             `json:"t,omitempty"`
}

func encodeTarget(t *job.Target) string {
	b, _ := json.Marshal(storedTarget{URL: t.URL, Method: t.Method, Headers: t.Headers, Timeout: t.Timeout.Milliseconds()})
	return string(b)
}

// decodeTarget reads a field 'tg'; a damaged one gives a target with an empty URL,
// which the executor fails.
func decodeTarget(v string) *job.Target {
	var st storedTarget
	_ = json.Unmarshal([]byte(v), &st)
	return &job.Target{URL: st.URL, Method: st.Method, Headers: st.Headers, Timeout: time.Duration(st.Timeout) * time.Millisecond}
}
