package shard

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/job"
)

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// scanRounds bounds the SCAN calls of one List page.
	scanRounds = 16
	scanCount  = 1000
	// filterScanCount is the COUNT of a filtered List's SCANs, and listReadBudget how
	// many jobs one List page reads at most (a round that starts below it completes: a
	// SCAN batch is never split). A key may name many jobs (a cold index, about 15 each
	// with 1,000,000 cold jobs on 64 shards): a first page filtered by queue and state
	// read up to 16 x 15,000 jobs, 350 ms at p99 (tock bench ui), where a short page with
	// its cursor answers in time.
	filterScanCount = 250
	listReadBudget  = 4000
)

// ListFilter selects jobs for List.
type ListFilter struct {
	Queue  string    // "" means every queue
	State  job.State // "" means every state
	Limit  int       // most jobs a page returns; default 100, at most 1000
	Cursor string    // from the previous page's Next; "" starts
}

// Page is one page of List.
type Page struct {
	Jobs []*Info
	// Next continues the listing; "" when it is complete. A page holds about Limit jobs:
	// it may hold a few more (a SCAN batch is never split: SCAN from the same cursor may
	// not return the same keys again), or fewer, even none, while Next is not empty (a
	// page does a bounded amount of work).
	Next string
}

func listLimit(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultListLimit, nil
	case n < 1 || n > MaxListLimit:
		return 0, &job.FieldError{Field: "limit", Msg: fmt.Sprintf("must be 1 to %d, got %d", MaxListLimit, n)}
	}
	return n, nil
}

// Primaries returns the addresses of c's primary nodes (one server, or a Cluster's
// masters: Nodes also lists replicas), sorted, and the clients of all its nodes.
func Primaries(ctx context.Context, c rueidis.Client) ([]string, map[string]rueidis.Client, error) {
	nodes := c.Nodes()
	if len(nodes) == 1 {
		for addr := range nodes {
			return []string{addr}, nodes, nil
		}
	}
	addrs := make([]string, 0, len(nodes))
	for addr, n := range nodes {
		role, err := n.Do(ctx, n.B().Role().Build()).ToArray()
		if err != nil {
			return nil, nil, fmt.Errorf("role of %s: %w", addr, err)
		}
		if len(role) > 0 && str(role[0]) == "master" {
			addrs = append(addrs, addr)
		}
	}
	sort.Strings(addrs)
	return addrs, nodes, nil
}

// List pages through the namespace's jobs, the packed ones (Config.NoPack) shard by shard
// with HSCAN, then the others node by node with SCAN: a job that exists
// throughout the listing is returned at least once (rarely twice); one created or
// removed meanwhile may or may not be. An invalid filter or a cursor that does not
// decode is a *job.FieldError naming "queue", "state", "limit" or "cursor".
func (s *Store) List(ctx context.Context, f ListFilter) (Page, error) {
	limit, err := listLimit(f.Limit)
	if err != nil {
		return Page{}, err
	}
	if f.Queue != "" {
		if err := job.ValidateID("queue", f.Queue, job.MaxQueueLen); err != nil {
			return Page{}, err
		}
	}
	if f.State != "" && !job.ValidState(f.State) {
		return Page{}, &job.FieldError{Field: "state", Msg: fmt.Sprintf("unknown state %q", f.State)}
	}
	addrs, nodes, err := Primaries(ctx, s.c)
	if err != nil {
		return Page{}, fmt.Errorf("list jobs: %w", err)
	}
	// The packed jobs first, shard by shard (see ScanAllJobs for why in this order), then
	// the keys, node by node.
	packed, node, cursor := 0, 0, uint64(0)
	if f.Cursor != "" {
		if packed, node, cursor, err = decodeListCursor(f.Cursor, addrs, s.cfg.Shards); err != nil {
			return Page{}, err
		}
	}
	keep := func(infos []*Info, page *Page) {
		for _, info := range infos {
			if (f.Queue == "" || info.Queue == f.Queue) && (f.State == "" || info.State == f.State) {
				page.Jobs = append(page.Jobs, info)
			}
		}
	}
	count := func(page *Page) int64 {
		// A SCAN batch is never split (a SCAN from the same cursor need not return the
		// same keys again), so the batch is sized to what the page still wants.
		if f.Queue != "" || f.State != "" {
			return filterScanCount
		}
		return int64(min(scanCount, max(16, limit-len(page.Jobs))))
	}
	var page Page
	read := 0 // jobs read, against listReadBudget
	for round := 0; round < scanRounds && packed < s.cfg.Shards && len(page.Jobs) < limit && read < listReadBudget; {
		ids, next, err := s.scanPacked(ctx, ID(packed), cursor, count(&page))
		if err != nil {
			return Page{}, fmt.Errorf("list jobs: %w", err)
		}
		if len(ids) > 0 {
			// Shards without packed jobs cost a round trip each, not a round.
			round++
			infos, err := s.listJobs(ctx, map[ID][]string{ID(packed): ids})
			if err != nil {
				return Page{}, err
			}
			read += len(infos)
			keep(infos, &page)
		}
		if cursor = next; cursor == 0 {
			packed++
		}
	}
	if packed < s.cfg.Shards {
		page.Next = encodeListCursor(packed, "", cursor)
		return page, nil
	}
	match, shards := s.jobMatch(), s.shardIDs()
	for round := 0; round < scanRounds && node < len(addrs) && len(page.Jobs) < limit && read < listReadBudget; round++ {
		n := nodes[addrs[node]]
		e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(match).Count(count(&page)).Build()).AsScanEntry()
		if err != nil {
			return Page{}, fmt.Errorf("list jobs: scan %s: %w", addrs[node], err)
		}
		batch, err := s.jobsOfKeys(ctx, shards, e.Elements)
		if err != nil {
			return Page{}, fmt.Errorf("list jobs: %w", err)
		}
		infos, err := s.listJobs(ctx, batch)
		if err != nil {
			return Page{}, err
		}
		read += len(infos)
		keep(infos, &page)
		if cursor = e.Cursor; cursor == 0 {
			node++
		}
	}
	if node < len(addrs) {
		page.Next = encodeListCursor(packed, addrs[node], cursor)
	}
	return page, nil
}

// listJobs reads the jobs of batch (ids per shard), sorted by id; jobs gone meanwhile are
// left out.
func (s *Store) listJobs(ctx context.Context, batch map[ID][]string) ([]*Info, error) {
	recs, err := s.readJobsOf(ctx, batch, false)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	var out []*Info
	for id, rs := range recs {
		for _, r := range rs {
			out = append(out, infoOf(r.ID, id, r.fieldMap(), r.ExpireAt))
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}

// A list cursor is "p|<shard>|<HSCAN cursor>" while the packed jobs are listed, then
// "<node address>|<SCAN cursor>".
func encodeListCursor(packed int, addr string, cursor uint64) string {
	if addr == "" {
		addr = "p|" + strconv.Itoa(packed)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(addr + "|" + strconv.FormatUint(cursor, 10)))
}

// decodeListCursor returns where cursor c resumes: the shard of the packed jobs (shards
// when they are done), the node and the cursor of its HSCAN or SCAN.
func decodeListCursor(c string, addrs []string, shards int) (packed, node int, cursor uint64, err error) {
	bad := &job.FieldError{Field: "cursor", Msg: "not a cursor returned by this API"}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, 0, 0, bad
	}
	i := strings.LastIndexByte(string(raw), '|')
	if i < 0 {
		return 0, 0, 0, bad
	}
	addr, cur := string(raw[:i]), string(raw[i+1:])
	if cursor, err = strconv.ParseUint(cur, 10, 64); err != nil {
		return 0, 0, 0, bad
	}
	if p, ok := strings.CutPrefix(addr, "p|"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n >= shards {
			return 0, 0, 0, bad
		}
		return n, 0, cursor, nil
	}
	for i, a := range addrs {
		if a == addr {
			return shards, i, cursor, nil
		}
	}
	return 0, 0, 0, &job.FieldError{Field: "cursor", Msg: fmt.Sprintf("Redis node %s is no longer a primary: start the listing again", addr)}
}

// Update changes parts of a job's definition: the fields that are not nil.
type Update struct {
	Schedule *job.Schedule
	Payload  *[]byte
	Priority *int
	Retry    *job.RetryPolicy
}

// defFields are the hash fields a definition may hold (see encode); 'ver' is the
// scripts' own.
var defFields = []string{"q", "t", "p", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "pr", "ma", "ib", "mb", "mu", "ji",
	"to", "vt", "sk", "sc", "tz", "ov", "mf", "mt", "sv"}

// definitionSchedule returns scheduled workflow definition payload (the workflow, as
// createDefinition stores it) with schedule sch, its job's: a create compares the
// workflow sent with it (sameDefinition), and the API shows it as the definition's.
func definitionSchedule(payload []byte, sch job.Schedule) ([]byte, error) {
	var w job.Workflow
	if err := json.Unmarshal(payload, &w); err != nil {
		return nil, fmt.Errorf("workflow definition: %w", err)
	}
	w.Schedule = &job.Schedule{Cron: sch.Cron, TimeZone: sch.TimeZone}
	return json.Marshal(&w)
}

// Update applies u to job jobID and returns the job as stored afterwards. A changed
// schedule moves the job's next run; runs already ready, running or waiting for a retry
// keep their time, ready ones take a changed priority. A job's schedule cannot turn
// from one-time to recurring or back, and a one-time job's schedule cannot change once
// its run has fired. Errors: ErrNotFound, a *job.FieldError naming the field at fault,
// a *StateError when the job's state does not allow the change.
func (s *Store) Update(ctx context.Context, jobID string, u Update) (*Info, error) {
	if err := s.refuseNodeJob(ctx, "update", jobID); err != nil {
		return nil, err
	}
	if err := job.ValidateRef("id", jobID, job.MaxIDLen); err != nil {
		return nil, err
	}
	id := s.ShardOf(jobID)
	key := s.keys.Job(id, jobID)
	for attempt := 0; ; attempt++ {
		m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(key).Build()).AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("update job %q: %w", jobID, err)
		}
		if len(m) == 0 {
			// A packed or cold job: update_job thaws it first (lua forms' thaw_job).
			if m, _, err = s.readOtherForms(ctx, id, jobID); err != nil {
				return nil, err
			}
		}
		oldDH := m["dh"]
		j := decodeInfo(jobID, m).Job
		maxPayload := s.cfg.MaxPayload
		if j.Type == job.WorkflowType {
			// A scheduled workflow's definition: its payload is the workflow, checked
			// when it was created, and holds its schedule (definitionSchedule).
			if u.Payload != nil {
				return nil, &WorkflowError{Op: "update", Workflow: jobID,
					Reason: "its payload is its definition, checked when it was created: delete it and create it again to change it"}
			}
			maxPayload = maxDefinitionPayload
		}
		if u.Schedule != nil {
			if u.Schedule.IsRecurring() != j.Schedule.IsRecurring() {
				return nil, &job.FieldError{Field: "schedule", Msg: "a one-time job cannot become recurring or the other way round: create a new job"}
			}
			j.Schedule = *u.Schedule
		}
		if u.Payload != nil {
			j.Payload = *u.Payload
		}
		if u.Priority != nil {
			p := *u.Priority
			j.Priority = &p
		}
		if u.Retry != nil {
			j.Retry = *u.Retry
		}
		if err := j.Normalize(maxPayload); err != nil {
			return nil, err
		}
		if j.Type == job.WorkflowType && u.Schedule != nil {
			if j.Payload, err = definitionSchedule(j.Payload, j.Schedule); err != nil {
				return nil, fmt.Errorf("update job %q: %w", jobID, err)
			}
		}
		e, err := encode(&j)
		if err != nil {
			return nil, err
		}
		kind, when := "", ""
		if u.Schedule != nil {
			kind, when = e.kind, e.when
			if e.cron != nil {
				est, err := s.ServerNow(ctx)
				if err != nil {
					return nil, err
				}
				if when, err = candidatesAfter(e.cron, est, lfOf(m["lf"])); err != nil {
					return nil, &job.FieldError{Field: "schedule.cron", Msg: err.Error()}
				}
			}
		}
		set := map[string]bool{}
		var setArgs []string
		for k := 0; k < len(e.def); k += 2 {
			if e.def[k] == "ver" {
				continue
			}
			set[e.def[k]] = true
			setArgs = append(setArgs, e.def[k], e.def[k+1])
		}
		var del []string // HDEL of a field the hash lacks is a no-op
		for _, f := range defFields {
			if !set[f] {
				del = append(del, f)
			}
		}
		args := append(s.jobArgs(id, jobID), oldDH, e.dh, kind, when, strconv.Itoa(len(del)), strconv.Itoa(len(setArgs)/2))
		args = append(append(args, del...), setArgs...)
		r, replErr := s.exec1Replicated(ctx, call{s.scripts.UpdateJob, []string{s.keys.Buckets(id)}, args})
		reply, err := r.ToArray()
		if err != nil {
			return nil, fmt.Errorf("update job %q: %w", jobID, err)
		}
		code := i64(reply[0])
		if (code == -5 || code == -4) && attempt < 3 {
			// A concurrent change: read again. No candidate after now: measure the clock.
			if code == -4 {
				if err := s.measureClock(ctx); err != nil {
					return nil, err
				}
			}
			continue
		}
		switch {
		case code == -5:
			return nil, fmt.Errorf("update job %q: changed concurrently %d times, try again", jobID, attempt+1)
		case code < 0:
			return nil, codeError(code)
		case code == 0:
			return nil, &StateError{Op: "update", JobID: jobID, State: str(reply[1])}
		}
		msgs := s.readySignals(nil, id, strs(reply[4]))
		if wake := i64(reply[3]); wake > 0 {
			msgs = append(msgs, s.wakeSignal(id, wake))
		}
		if len(reply) > 5 {
			msgs = s.holdSignals(msgs, id, strs(reply[5]))
		}
		s.publish(ctx, msgs)
		if replErr != nil {
			return nil, fmt.Errorf("update job %q: %w", jobID, replErr)
		}
		return s.Get(ctx, jobID)
	}
}

// DeadRun is an entry of the dead-letter set.
type DeadRun struct {
	Member   string // "<job id>:<due ms>": names the run
	JobID    string
	Queue    string
	Type     string
	Due      time.Time
	DiedAt   time.Time
	Attempts int
	Error    string
	Shard    ID
}

// Dead pages through the dead-letter sets, shard by shard, oldest death first within
// a shard; queue "" means every queue. limit defaults to 100 (at most 1000). next is ""
// when the listing is complete. A bad queue, limit or cursor is a *job.FieldError.
func (s *Store) Dead(ctx context.Context, queue string, limit int, cursor string) (runs []DeadRun, next string, err error) {
	if limit, err = listLimit(limit); err != nil {
		return nil, "", err
	}
	if queue != "" {
		if err := job.ValidateID("queue", queue, job.MaxQueueLen); err != nil {
			return nil, "", err
		}
	}
	// The cursor is "<shard>|<score>|<member>" of the last entry returned: entries of a
	// dead set are ordered by score, then member, so the next page starts right after
	// it even when entries before it were removed meanwhile.
	sh, score, last := 0, int64(0), ""
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		p := strings.Split(string(raw), "|")
		var e1, e2 error
		if err == nil && len(p) == 3 {
			sh, e1 = strconv.Atoi(p[0])
			score, e2 = strconv.ParseInt(p[1], 10, 64)
			last = p[2]
		}
		if err != nil || len(p) != 3 || errors.Join(e1, e2) != nil || sh < 0 || sh >= s.cfg.Shards {
			return nil, "", &job.FieldError{Field: "cursor", Msg: "not a cursor returned by this API"}
		}
	}
	for rounds := 0; sh < s.cfg.Shards && len(runs) < limit && rounds < 4*scanRounds; rounds++ {
		id := ID(sh)
		key := s.keys.Dead(id)
		want := limit - len(runs)
		var entries []rueidis.ZScore
		min := "-inf"
		if last != "" {
			sc := strconv.FormatInt(score, 10)
			ties, err := s.c.Do(ctx, s.c.B().Zrangebyscore().Key(key).Min(sc).Max(sc).Withscores().Build()).AsZScores()
			if err != nil {
				return nil, "", fmt.Errorf("dead runs of shard %d: %w", sh, err)
			}
			for _, e := range ties {
				if e.Member > last && len(entries) < want {
					entries = append(entries, e)
				}
			}
			min = "(" + sc
		}
		exhausted := false
		if n := want - len(entries); n > 0 {
			more, err := s.c.Do(ctx, s.c.B().Zrangebyscore().Key(key).Min(min).Max("+inf").
				Withscores().Limit(0, int64(n)).Build()).AsZScores()
			if err != nil {
				return nil, "", fmt.Errorf("dead runs of shard %d: %w", sh, err)
			}
			entries = append(entries, more...)
			exhausted = len(more) < n
		}
		got, err := s.readDead(ctx, id, entries)
		if err != nil {
			return nil, "", err
		}
		for _, r := range got {
			if queue == "" || r.Queue == queue {
				runs = append(runs, r)
			}
		}
		if exhausted {
			sh, score, last = sh+1, 0, ""
		} else {
			e := entries[len(entries)-1]
			score, last = int64(e.Score), e.Member
		}
	}
	if sh < s.cfg.Shards {
		next = base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(sh) + "|" + strconv.FormatInt(score, 10) + "|" + last))
	}
	return runs, next, nil
}

func (s *Store) readDead(ctx context.Context, id ID, entries []rueidis.ZScore) ([]DeadRun, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	cmds := make(rueidis.Commands, len(entries))
	for i, e := range entries {
		jobID, due, _ := SplitMember(e.Member)
		cmds[i] = s.c.B().Hmget().Key(s.keys.Job(id, jobID)).Field("q", "t", "r"+strconv.FormatInt(due, 10)).Build()
	}
	out := make([]DeadRun, 0, len(entries))
	for i, r := range s.c.DoMulti(ctx, cmds...) {
		f, err := r.ToArray()
		if err != nil || len(f) != 3 {
			return nil, fmt.Errorf("dead runs of shard %d: %v", id, err)
		}
		jobID, due, _ := SplitMember(entries[i].Member)
		d := DeadRun{Member: entries[i].Member, JobID: jobID, Due: dueTime(due), DiedAt: ms(int64(entries[i].Score)),
			Queue: str(f[0]), Type: str(f[1]), Shard: id}
		if d.Queue == "" {
			d.Queue = job.DefaultQueue
		}
		// The run field: "st|att|dl|tok|wk|sa|ra|er" (common.lua run_get).
		if p := strings.SplitN(str(f[2]), "|", 8); len(p) == 8 {
			d.Attempts, _ = strconv.Atoi(p[1])
			d.Error = p[7]
		}
		out = append(out, d)
	}
	return out, nil
}

func (s *Store) deadArgs(member string) (ID, error) {
	jobID, _, ok := SplitMember(member)
	if !ok || job.ValidateRef("run", jobID, job.MaxIDLen) != nil {
		return 0, &job.FieldError{Field: "run", Msg: fmt.Sprintf("%q is not a run: want <job id>:<due ms>", member)}
	}
	return s.ShardOf(jobID), nil
}

// RequeueDead gives a dead run a fresh set of attempts and makes it ready again (parked
// when its job is paused). ErrNotFound when member is not in the dead-letter set; a
// *StateError when its job has been cancelled or completed since.
func (s *Store) RequeueDead(ctx context.Context, member string) error {
	id, err := s.deadArgs(member)
	if err != nil {
		return err
	}
	// A workflow's node failed for its workflow already: a retry of the workflow runs
	// it again (and what hangs on it).
	if jobID, _, ok := SplitMember(member); ok {
		if err := refuseNode("requeue a dead run of", jobID); err != nil {
			return err
		}
	}
	r, replErr := s.exec1Replicated(ctx, call{s.scripts.RequeueDead, []string{s.keys.Dead(id)}, []string{s.keys.Prefix(id), member}})
	reply, err := r.ToArray()
	if err != nil {
		return fmt.Errorf("requeue dead run %q: %w", member, err)
	}
	switch code := i64(reply[0]); {
	case code < 0:
		return codeError(code)
	case code == 0:
		jobID, _, _ := SplitMember(member)
		return &StateError{Op: "requeue a dead run of", JobID: jobID, State: str(reply[1])}
	}
	s.publish(ctx, s.readySignals(nil, id, strs(reply[2])))
	if replErr != nil {
		return fmt.Errorf("requeue dead run %q: %w", member, replErr)
	}
	return nil
}

// DeleteDead removes a run from the dead-letter set for good. ErrNotFound when member is
// not there.
func (s *Store) DeleteDead(ctx context.Context, member string) error {
	id, err := s.deadArgs(member)
	if err != nil {
		return err
	}
	r, replErr := s.exec1Replicated(ctx, call{s.scripts.DeleteDead, []string{s.keys.Dead(id)},
		[]string{s.keys.Prefix(id), member, strconv.FormatInt(s.cfg.Retention.Milliseconds(), 10)}})
	code, err := r.AsInt64()
	if err != nil {
		return fmt.Errorf("delete dead run %q: %w", member, err)
	}
	if code < 0 {
		return codeError(code)
	}
	if replErr != nil {
		return fmt.Errorf("delete dead run %q: %w", member, replErr)
	}
	return nil
}

// QueueStats are one queue's counts over all shards.
type QueueStats struct {
	Queue     string
	Paused    bool
	Scheduled int64 // runs waiting for their due time (first runs and retries)
	Ready     int64
	InFlight  int64
	Dead      int64
	Fired     int64 // runs made ready since the namespace was created (retries, hand-backs and resumed runs included)
}

// Queues returns the figures of every queue that ever held a run, and of paused queues,
// sorted by name. Scheduled, in-flight and dead counts are kept by the scripts; ready
// counts are the ready sets' sizes.
func (s *Store) Queues(ctx context.Context) ([]QueueStats, error) {
	byQueue, perShard, err := s.stats(ctx)
	if err != nil {
		return nil, err
	}
	paused, err := s.PausedQueues(ctx)
	if err != nil {
		return nil, err
	}
	for q := range paused {
		if byQueue[q] == nil {
			byQueue[q] = &QueueStats{Queue: q}
		}
		byQueue[q].Paused = true
	}
	// Ready counts: the runs of each queue's ready set on each shard that knows the queue,
	// all but its pin, scored +inf (lua common's READY_PIN).
	var cmds rueidis.Commands
	var who []*QueueStats
	for sh, qs := range perShard {
		for _, q := range qs {
			cmds = append(cmds, s.c.B().Zcount().Key(s.keys.Ready(ID(sh), q)).Min("-inf").Max(RunScoreMax).Build())
			who = append(who, byQueue[q])
		}
	}
	for i, r := range s.c.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("queue stats: %w", err)
		}
		who[i].Ready += n
	}
	out := make([]QueueStats, 0, len(byQueue))
	for _, q := range byQueue {
		out = append(out, *q)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Queue < out[b].Queue })
	return out, nil
}

// stats sums the shards' stats hashes by queue; perShard lists the queues each shard knows.
func (s *Store) stats(ctx context.Context) (map[string]*QueueStats, [][]string, error) {
	cmds := make(rueidis.Commands, s.cfg.Shards)
	for i := range cmds {
		cmds[i] = s.c.B().Hgetall().Key(s.keys.Stats(ID(i))).Build()
	}
	byQueue := map[string]*QueueStats{}
	perShard := make([][]string, s.cfg.Shards)
	for sh, r := range s.c.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil {
			return nil, nil, fmt.Errorf("queue stats of shard %d: %w", sh, err)
		}
		for f, v := range m {
			kind, q, ok := strings.Cut(f, ":")
			n, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil || kind == "w" { // w: workflow counts (WorkflowCounts)
				continue
			}
			qs := byQueue[q]
			if qs == nil {
				qs = &QueueStats{Queue: q}
				byQueue[q] = qs
			}
			if kind == "n" {
				perShard[sh] = append(perShard[sh], q)
			}
			// A count can drift below zero only when a run's job vanished while counted;
			// a shard's negative count is read as zero.
			n = max(n, 0)
			switch kind {
			case "s":
				qs.Scheduled += n
			case "f":
				qs.InFlight += n
			case "d":
				qs.Dead += n
			case "n":
				qs.Fired += n
			}
		}
	}
	return byQueue, perShard, nil
}

// Backlog returns the runs ready or in flight over all shards and queues.
func (s *Store) Backlog(ctx context.Context) (int64, error) {
	_, perShard, err := s.stats(ctx)
	if err != nil {
		return 0, err
	}
	var cmds rueidis.Commands
	for sh, qs := range perShard {
		// The sets' runs: all but their pins, scored +inf (lua common's INFLIGHT_PIN and
		// READY_PIN).
		cmds = append(cmds, s.c.B().Zcount().Key(s.keys.Inflight(ID(sh))).Min("-inf").Max(RunScoreMax).Build())
		for _, q := range qs {
			cmds = append(cmds, s.c.B().Zcount().Key(s.keys.Ready(ID(sh), q)).Min("-inf").Max(RunScoreMax).Build())
		}
	}
	var total int64
	for _, r := range s.c.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return 0, fmt.Errorf("backlog: %w", err)
		}
		total += n
	}
	return total, nil
}

// PauseQueue stops workers from claiming from queue (runs still fire into its ready
// sets). changed is false when it was paused already. Workers learn it from a signal at
// once, or from their next sweep; a claim round a worker had already started may still
// take runs of the queue.
func (s *Store) PauseQueue(ctx context.Context, queue string) (changed bool, err error) {
	return s.setQueuePaused(ctx, queue, true)
}

// ResumeQueue undoes PauseQueue.
func (s *Store) ResumeQueue(ctx context.Context, queue string) (changed bool, err error) {
	return s.setQueuePaused(ctx, queue, false)
}

func (s *Store) setQueuePaused(ctx context.Context, queue string, pause bool) (bool, error) {
	if err := job.ValidateID("queue", queue, job.MaxQueueLen); err != nil {
		return false, err
	}
	verb := "resume"
	build := func() rueidis.Completed { return s.c.B().Srem().Key(s.keys.PausedQueues()).Member(queue).Build() }
	if pause {
		verb = "pause"
		build = func() rueidis.Completed { return s.c.B().Sadd().Key(s.keys.PausedQueues()).Member(queue).Build() }
	}
	var r rueidis.RedisResult
	var replErr error
	if s.cfg.Durability.Replicas > 0 {
		// A MOVED or ASK comes back from doReplicated (the command did not run): retried as
		// execute does.
		fences := []string{s.keys.Fence(s.keys.PausedQueues())}
		for attempt := 0; ; attempt++ {
			res, errs := s.doReplicated(ctx, rueidis.Commands{build()}, fences)
			r, replErr = res[0], errs[0]
			if re, ok := rueidis.IsRedisErr(r.Error()); !ok || !redirected(re) || attempt == 20 {
				break
			}
			select {
			case <-ctx.Done():
				r = rueidis.NewErrorResult(ctx.Err())
			case <-time.After(time.Duration(attempt+1) * 50 * time.Millisecond):
				continue
			}
			break
		}
	} else {
		r = s.c.Do(ctx, build())
	}
	n, err := r.AsInt64()
	if err != nil {
		return false, fmt.Errorf("%s queue %q: %w", verb, queue, err)
	}
	s.publish(ctx, [][2]string{{s.keys.QueueChannel(), verb + " " + queue}})
	if replErr != nil {
		return false, fmt.Errorf("%s queue %q: %w", verb, queue, replErr)
	}
	return n == 1, nil
}

// PausedQueues returns the paused queues.
func (s *Store) PausedQueues(ctx context.Context) (map[string]bool, error) {
	qs, err := s.c.Do(ctx, s.c.B().Smembers().Key(s.keys.PausedQueues()).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("paused queues: %w", err)
	}
	out := make(map[string]bool, len(qs))
	for _, q := range qs {
		out[q] = true
	}
	return out, nil
}
