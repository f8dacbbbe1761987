package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/job"
)

// Claimed is a run handed to a worker.
type Claimed struct {
	Shard       ID
	Member      string // `<jobID>:<due ms>`; stable across attempts: the run id
	JobID       string
	Due         time.Time
	Token       string // proves the claim; ack and fail need it
	Attempt     int    // 1-based
	MaxAttempts int
	Type        string
	Payload     []byte
	Timeout     time.Duration
	Visibility  time.Duration
	ClaimedAt   time.Time // Redis time of the claim
	// StartAt is when the run may start, on the Redis clock: its due time, or a retry's
	// retry time. A dispatcher with a lead fires runs up to that long ahead, so StartAt
	// may be after ClaimedAt; the worker SDK then holds the run until StartAt.
	StartAt time.Time
	// Target is the job's push target (job.Target; jobs of type job.PushType have one),
	// nil for other jobs. A damaged target has an empty URL.
	Target *job.Target
}

// Claim pops up to n ready runs of queue from a shard for worker (nonce is random per
// worker process and goes into each token).
func (s *Store) Claim(ctx context.Context, id ID, queue string, n int, worker, nonce string) ([]Claimed, error) {
	r := s.ClaimMany(ctx, []ClaimRequest{{Shard: id, Queue: queue, N: n}}, worker, nonce)[0]
	return r.Runs, r.Err
}

// MaxClaim bounds the runs one claim takes from a shard: a script passes a Redis command
// at most about 8,000 arguments (Lua's unpack), and the in-flight set takes two per run.
const MaxClaim = 1000

// ClaimRequest asks for up to N ready runs of Queue on Shard (at most MaxClaim), of
// which at most Now may start at once: the others must be runs that a dispatcher fired
// ahead of their start time (Claimed.StartAt after the claim), which a worker holds
// without a handler slot. Now 0 means N, a negative Now none. The claim takes runs in
// the ready set's order and stops at the first that does not fit.
//
// NoAhead takes only runs that start now: the claim stops at the first run fired ahead
// of its start time (ClaimResult.More is then set). It is for workers that cannot be
// trusted to hold a run until its start, such as those of the HTTP API.
type ClaimRequest struct {
	Shard   ID
	Queue   string
	N       int
	Now     int
	NoAhead bool
}

// ClaimResult is what one ClaimRequest got.
type ClaimResult struct {
	Runs []Claimed
	At   int64 // the Redis time (µs) of the claim; with ParseReady, tells a ready signal the claim could not have seen
	// More is set when the queue may hold more ready runs: the claim took all it asked
	// for, or stopped at a run beyond ClaimRequest.Now. Unset, the set was empty.
	More bool
	Err  error
}

// ClaimMany claims from several shards and queues in one pipeline (one round trip on a
// single server, one per node on a cluster); results are in the order of reqs.
func (s *Store) ClaimMany(ctx context.Context, reqs []ClaimRequest, worker, nonce string) []ClaimResult {
	calls := make([]call, len(reqs))
	for i, q := range reqs {
		args := []string{s.keys.Prefix(q.Shard), strconv.Itoa(min(q.N, MaxClaim)), worker, nonce, q.Queue, strconv.Itoa(max(q.Now, -1))}
		if q.NoAhead {
			args = append(args, "1")
		}
		calls[i] = call{s.scripts.ClaimRuns, []string{s.keys.Ready(q.Shard, q.Queue), s.keys.Inflight(q.Shard)}, args}
	}
	out := make([]ClaimResult, len(reqs))
	for i, r := range s.exec(ctx, calls...) {
		out[i] = parseClaim(reqs[i], r.ToArray)
	}
	return out
}

func parseClaim(q ClaimRequest, toArray func() ([]rueidis.RedisMessage, error)) ClaimResult {
	reply, err := toArray()
	if err != nil || len(reply) < 5 {
		return ClaimResult{Err: fmt.Errorf("claim from shard %d queue %q: %v", q.Shard, q.Queue, err)}
	}
	raw := arr(reply[1])
	runs := make([]string, len(raw))
	for i, m := range raw {
		runs[i] = str(m)
	}
	out, err := parseClaimRuns(q.Shard, ms(i64(reply[0])), str(reply[3]), runs)
	if err != nil {
		return ClaimResult{Err: fmt.Errorf("claim from shard %d queue %q: %w", q.Shard, q.Queue, err)}
	}
	if len(reply) > 5 {
		setTargets(out, arr(reply[5]))
	}
	return ClaimResult{Runs: out, At: i64(reply[2]), More: i64(reply[4]) == 1}
}

// setTargets gives the push runs of job hashes among runs their targets, from a claim
// reply's targets (member, target, ...).
func setTargets(runs []Claimed, targets []rueidis.RedisMessage) {
	byMember := make(map[string]string, len(targets)/2)
	for k := 0; k+1 < len(targets); k += 2 {
		byMember[str(targets[k])] = str(targets[k+1])
	}
	for i := range runs {
		if tg, ok := byMember[runs[i].Member]; ok {
			runs[i].Target = decodeTarget(tg)
		}
	}
}

// parseClaimRuns decodes the runs of a claim_runs reply (see its header), claimed at now
// with firstTok as a first attempt's token.
func parseClaimRuns(id ID, now time.Time, firstTok string, raw []string) ([]Claimed, error) {
	out := make([]Claimed, 0, len(raw)/2)
	for k := 0; k < len(raw); {
		c := Claimed{
			Shard: id, Token: firstTok, Attempt: 1, MaxAttempts: job.DefaultMaxAttempts,
			Timeout: job.DefaultTimeout, Visibility: job.DefaultVisibility, ClaimedAt: now,
		}
		if member := raw[k]; member != "" {
			// A packed job's first attempt: member and packed value. Only a damaged value is
			// unreadable; the call's runs are then redelivered (below).
			if k+1 >= len(raw) {
				return nil, errors.New("short reply")
			}
			c.Member = member
			if err := c.parsePacked(raw[k+1]); err != nil {
				return nil, fmt.Errorf("run %s: packed job: %w", c.Member, err)
			}
			k += 2
		} else {
			if k+4 >= len(raw) {
				return nil, errors.New("short reply")
			}
			c.Member, c.Type, c.Payload = raw[k+1], raw[k+2], []byte(raw[k+3])
			// Only a damaged job hash gives an unreadable rest. The call's runs are then
			// redelivered after their visibility deadlines, as a lost worker's are.
			if rest := raw[k+4]; rest != "" {
				if err := c.parseRest(rest); err != nil {
					return nil, fmt.Errorf("run %s: %q: %w", c.Member, rest, err)
				}
			}
			k += 5
		}
		var due int64
		c.JobID, due, _ = SplitMember(c.Member)
		c.Due = dueTime(due)
		if c.StartAt.Before(c.Due) {
			c.StartAt = c.Due
		}
		out = append(out, c)
	}
	return out, nil
}

// parseRest reads what claim_runs returns for a run that is not a first attempt with
// the default settings: "token|attempt|timeout ms|visibility ms|max attempts|start ms",
// where an empty setting keeps its default and an empty start means the due time.
func (c *Claimed) parseRest(rest string) error {
	p := strings.Split(rest, "|")
	if len(p) != 6 || p[0] == "" {
		return fmt.Errorf("%d fields, want 6 with a token", len(p))
	}
	if p[5] != "" {
		start, err := strconv.ParseInt(p[5], 10, 64)
		if err != nil {
			return err
		}
		c.StartAt = ms(start)
	}
	att, err := strconv.Atoi(p[1])
	if err != nil {
		return err
	}
	c.Token, c.Attempt = p[0], att
	for i, dst := range []*time.Duration{&c.Timeout, &c.Visibility} {
		if v := p[2+i]; v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return err
			}
			*dst = time.Duration(n) * time.Millisecond
		}
	}
	if p[4] != "" {
		if c.MaxAttempts, err = strconv.Atoi(p[4]); err != nil {
			return err
		}
	}
	return nil
}

// trunc shortens s for an error message.
func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Held names a run a worker holds.
type Held struct {
	Member string
	Token  string
}

// Extend results, per run.
const (
	ExtendOK        = 1  // deadline pushed
	ExtendCancelled = 0  // the job was cancelled: stop the handler
	ExtendHold      = 2  // the job is paused and the run's start time is still to come: hand it back unless started
	ExtendLost      = -2 // not held any more (redelivered or finished)
)

// Extend pushes the visibility deadlines of runs held on one shard and reports, per
// run, ExtendOK, ExtendCancelled, ExtendHold or ExtendLost.
func (s *Store) Extend(ctx context.Context, id ID, held []Held) ([]int, error) {
	args := make([]string, 0, 2+2*len(held))
	args = append(args, s.keys.Prefix(id), strconv.Itoa(len(held)))
	for _, h := range held {
		args = append(args, h.Member, h.Token)
	}
	reply, err := s.exec1(ctx, call{s.scripts.ExtendRuns, []string{s.keys.Inflight(id)}, args}).ToArray()
	if err != nil || len(reply) != len(held) {
		return nil, fmt.Errorf("extend runs on shard %d: %v", id, err)
	}
	out := make([]int, len(reply))
	for i, r := range reply {
		out[i] = int(i64(r))
	}
	return out, nil
}

// Outcome of an attempt, as a worker reports it.
type Outcome string

// Attempt outcomes.
const (
	Succeeded Outcome = "ok"       // done
	Failed    Outcome = "error"    // retry by the job's policy, or dead after the last attempt
	Cancelled Outcome = "cancel"   // do not retry
	Snoozed   Outcome = "snooze"   // retry after Delay without using an attempt
	HandBack  Outcome = "handback" // ready again at once without using an attempt
)

// MaxErrorLen bounds the error text stored per run.
const MaxErrorLen = 2048

// Finish is the end of one attempt.
type Finish struct {
	Member  string
	Token   string
	Outcome Outcome
	Error   string // for Failed and Cancelled
	// Delay is the snooze of Snoozed; for Failed, above 0, the time to the retry instead
	// of the job's backoff (the attempt is used either way).
	Delay time.Duration
	// Result, not nil, is kept with a Succeeded run (job.Run.Result; callers bound it,
	// at most MaxResult bytes): the job's history reads it back while the job is kept, and a recurring
	// job keeps those of its newest Config.History runs. A packed job's run with a
	// result makes the job a hash first, as any end but a plain success does.
	Result []byte
}

// MaxResult is the largest result a caller should store per run (Finish.Result): the
// API's Config.MaxResult may not be set above it, and the worker SDK fails a run whose
// handler set a larger one.
const MaxResult = 1 << 20

// FinishRuns records the ends of attempts of runs of one shard in one call and returns
// per run nil or ErrTokenMismatch (the run was redelivered or finished meanwhile: the
// late report is rejected). The error is a Redis error for the whole call.
func (s *Store) FinishRuns(ctx context.Context, id ID, fs []Finish) ([]error, error) {
	res := s.FinishMany(ctx, map[ID][]Finish{id: fs})
	return res[id].Errs, res[id].Err
}

// FinishResult is the outcome of the reports of one shard.
type FinishResult struct {
	Errs []error // per report: nil, or ErrTokenMismatch
	Err  error   // a Redis error for the shard's whole call
}

// FinishMany records ends of attempts of runs of several shards in one pipeline, one
// script call per shard.
func (s *Store) FinishMany(ctx context.Context, byShard map[ID][]Finish) map[ID]FinishResult {
	ids := make([]ID, 0, len(byShard))
	calls := make([]call, 0, len(byShard))
	for id, fs := range byShard {
		// A success with the token of the first success (most runs of a worker's call
		// share it: a first attempt's token is the same for every run a worker process
		// claims) goes as its member alone; any other entry in full, after an empty
		// value (finish_runs).
		short := ""
		for _, f := range fs {
			if f.Outcome == Succeeded && f.Result == nil {
				short = f.Token
				break
			}
		}
		rest := make([]string, 0, 2+len(fs))
		rest = append(rest, strconv.Itoa(len(fs)), short)
		for _, f := range fs {
			if f.Outcome == Succeeded && f.Token == short && short != "" && f.Member != "" && f.Result == nil {
				rest = append(rest, f.Member)
				continue
			}
			if f.Outcome == Succeeded && f.Result != nil {
				// A success with a result: outcome 'result', the result in the error's place.
				rest = append(rest, "", f.Member, f.Token, "result", string(f.Result), "0")
				continue
			}
			msg := f.Error
			if len(msg) > MaxErrorLen {
				msg = strings.ToValidUTF8(msg[:MaxErrorLen], "")
			}
			rest = append(rest, "", f.Member, f.Token, string(f.Outcome), msg, strconv.FormatInt(f.Delay.Milliseconds(), 10))
		}
		ids = append(ids, id)
		calls = append(calls, s.finishCall(id, "worker", "", rest))
	}
	out := make(map[ID]FinishResult, len(ids))
	// Each call signals the queues that got ready runs, and the shard's dispatcher of a
	// retry or snooze earlier than every run the shard held, itself (finishCall).
	for k, r := range s.exec(ctx, calls...) {
		id, fs := ids[k], byShard[ids[k]]
		reply, err := r.ToArray()
		if err != nil || len(reply) != 3 {
			out[id] = FinishResult{Err: fmt.Errorf("finish runs on shard %d: %v", id, err)}
			continue
		}
		codes := arr(reply[0])
		errs := make([]error, len(fs))
		for i := range errs {
			if i >= len(codes) {
				errs[i] = fmt.Errorf("finish runs on shard %d: short reply", id)
			} else if c := i64(codes[i]); c < 0 {
				errs[i] = codeError(c)
			}
		}
		out[id] = FinishResult{Errs: errs}
	}
	return out
}
