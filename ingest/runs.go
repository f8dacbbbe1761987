package ingest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// The run endpoints: workers in any language claim runs over HTTP, heartbeat them and
// report how they ended, with the same lease tokens as the Go worker SDK
// (docs/executors.md).

// Limits of the run endpoints.
const (
	// MaxClaimRuns bounds ClaimRequest.Max.
	MaxClaimRuns = shard.MaxClaim
	// MaxClaimWait bounds ClaimRequest.Wait.
	MaxClaimWait = time.Minute
	// MaxClaimQueues bounds ClaimRequest.Queues, and MaxClaimTypes its Types.
	MaxClaimQueues = 64
	MaxClaimTypes  = 256
	// MaxHeartbeatRuns bounds the runs of one heartbeat.
	MaxHeartbeatRuns = 1000
	// MaxReportRuns bounds the runs of one batch report (POST /v1/runs:ack and
	// /v1/runs:fail): as many as a claim may return.
	MaxReportRuns = MaxClaimRuns
	// DefaultMaxResult is the default of Config.MaxResult.
	DefaultMaxResult = 64 << 10
	// maxRunDelay bounds a snooze's delay and a failure's retry_after.
	maxRunDelay = 366 * 24 * time.Hour
	// maxToken bounds a token as sent.
	maxToken = 256
	// maxWorkerName bounds ClaimRequest.Worker.
	maxWorkerName = 128
)

// How a claim that found nothing waits: a ready signal of one of its queues wakes it
// (the shard it names is claimed at once), and every pullSweep it claims from every
// shard again, as pub/sub may drop a message. A source that stopped at a run fired ahead
// of its start time is tried again every pullAhead.
const (
	pullSweep = time.Second
	pullAhead = 20 * time.Millisecond
	// pullPerSource is the least a claim asks of a source when it has the room (a claim
	// call costs Redis about as much as a few runs: worker/claim.go).
	pullPerSource = 64
)

// pullState is the server's state for the run endpoints.
type pullState struct {
	rot     atomic.Uint64          // rotates the first source of claims, so that no shard starves
	waiting atomic.Pointer[func()] // tests: called when a claim starts to wait
}

// source is a queue of a shard.
type pullSource struct {
	queue string
	shard shard.ID
}

// claimRuns serves POST /v1/runs:claim.
func (s *Server) claimRuns(ctx *fasthttp.RequestCtx, _ string) {
	if !requireJSON(ctx) {
		return
	}
	var req ClaimRequest
	if aerr := decodeJSON(ctx.PostBody(), &req); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	wait, aerr := checkClaim(&req)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	runs, aerr := s.pull(ctx, &req, wait)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	s.addParents(ctx, runs)
	writeClaimReply(ctx, runs)
}

// checkClaim validates a claim request, setting its defaults, and returns its wait.
func checkClaim(req *ClaimRequest) (time.Duration, *apiError) {
	if len(req.Queues) == 0 {
		return 0, invalid("queues", "at least one queue is required")
	}
	if len(req.Queues) > MaxClaimQueues {
		return 0, invalid("queues", "more than "+strconv.Itoa(MaxClaimQueues)+" queues")
	}
	seen := map[string]bool{}
	for i, q := range req.Queues {
		if err := job.ValidateID("queues["+strconv.Itoa(i)+"]", q, job.MaxQueueLen); err != nil {
			return 0, normalizeError(err)
		}
		if seen[q] {
			return 0, invalid("queues["+strconv.Itoa(i)+"]", "queue "+strconv.Quote(q)+" is listed twice")
		}
		seen[q] = true
	}
	if len(req.Types) > MaxClaimTypes {
		return 0, invalid("types", "more than "+strconv.Itoa(MaxClaimTypes)+" types")
	}
	for i, t := range req.Types {
		if t == "" || len(t) > job.MaxTypeLen {
			return 0, invalid("types["+strconv.Itoa(i)+"]", "must be 1 to "+strconv.Itoa(job.MaxTypeLen)+" bytes")
		}
	}
	switch {
	case req.Max == 0:
		req.Max = 1
	case req.Max < 0 || req.Max > MaxClaimRuns:
		return 0, invalid("max", "must be 1 to "+strconv.Itoa(MaxClaimRuns)+", got "+strconv.Itoa(req.Max))
	}
	if err := job.ValidateID("worker", req.Worker, maxWorkerName); err != nil {
		return 0, normalizeError(err)
	}
	wait, aerr := parseDuration("wait", req.Wait)
	if aerr != nil {
		return 0, aerr
	}
	if wait < 0 || wait > MaxClaimWait {
		return 0, invalid("wait", "must be 0 to "+MaxClaimWait.String()+", got "+strconv.Quote(req.Wait))
	}
	return wait, nil
}

// pull claims up to req.Max runs that start now, waiting up to wait for some when none
// is ready. Runs of a type not in req.Types are handed back at once.
func (s *Server) pull(ctx *fasthttp.RequestCtx, req *ClaimRequest, wait time.Duration) ([]pulledRun, *apiError) {
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	shards := s.store.Shards()
	all := make([]pullSource, 0, len(req.Queues)*shards)
	first := int(s.runsPull.rot.Add(1) % uint64(shards))
	for _, q := range req.Queues {
		for i := range shards {
			all = append(all, pullSource{q, shard.ID((first + i) % shards)})
		}
	}
	types := map[string]bool{}
	for _, t := range req.Types {
		types[t] = true
	}
	p := &puller{s: s, req: req, nonce: nonce, types: types, skip: map[pullSource]bool{}, out: make([]pulledRun, 0, min(req.Max, 256))}

	// A first pass over every source.
	if aerr := p.pass(ctx, all); aerr != nil || len(p.out) > 0 || wait == 0 {
		return p.out, aerr
	}

	// Nothing yet: wait for ready signals, then claim the shards they name.
	deadline := time.Now().Add(wait)
	sig := make(chan shard.ID, 256)
	dropped := atomic.Bool{} // a signal did not fit in sig: sweep
	subscribed := make(chan struct{}, 1)
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	chans := make([]string, len(req.Queues))
	for i, q := range req.Queues {
		chans[i] = s.store.Keys().ReadyChannel(q)
	}
	go func() {
		defer close(done)
		hctx := rueidis.WithOnSubscriptionHook(sctx, func(rueidis.PubSubSubscription) {
			select {
			case subscribed <- struct{}{}:
			default:
			}
		})
		for sctx.Err() == nil {
			err := s.store.Subscribe(hctx, chans, func(_, msg string) {
				if id, _, ok := shard.ParseReady(msg, shards); ok {
					select {
					case sig <- id:
					default:
						dropped.Store(true)
					}
				}
			})
			if err == nil || sctx.Err() != nil {
				return
			}
			select { // the connection failed: the sweeps go on meanwhile
			case <-sctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() {
		stop()
		<-done
	}()

	if f := s.runsPull.waiting.Load(); f != nil {
		(*f)()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	sweep := time.NewTicker(pullSweep)
	defer sweep.Stop()
	var aheadC <-chan time.Time
	for {
		if len(p.ahead) > 0 && aheadC == nil {
			aheadC = time.After(pullAhead)
		}
		var todo []pullSource
		select {
		case <-ctx.Done():
			return p.out, nil
		case <-s.quit:
			return p.out, nil
		case <-timer.C:
			return p.out, nil
		case <-subscribed:
			// Runs made ready before the subscription took effect sent no signal it saw.
			todo = all
		case <-sweep.C:
			todo = all
		case id := <-sig:
			if dropped.Swap(false) {
				todo = all
				break
			}
			for _, q := range req.Queues {
				todo = append(todo, pullSource{q, id})
			}
		case <-aheadC:
			aheadC = nil
			todo, p.ahead = p.ahead, nil
		}
		if aerr := p.pass(ctx, todo); aerr != nil || len(p.out) > 0 {
			return p.out, aerr
		}
	}
}

// puller is the state of one claim request.
type puller struct {
	s     *Server
	req   *ClaimRequest
	nonce string
	types map[string]bool
	skip  map[pullSource]bool // sources whose runs of other types were handed back
	ahead []pullSource        // sources that stopped at a run fired ahead of its start
	out   []pulledRun
}

// pass claims from srcs what is left of req.Max, in rounds of one pipeline each: a
// round asks its sources for shares of what is left (never more in all), and the
// sources that gave all they were asked for are asked again in the next round.
func (p *puller) pass(ctx *fasthttp.RequestCtx, srcs []pullSource) *apiError {
	p.ahead = p.ahead[:0]
	todo := make([]pullSource, 0, len(srcs))
	for _, src := range srcs {
		if !p.skip[src] {
			todo = append(todo, src)
		}
	}
	for len(todo) > 0 {
		left := p.req.Max - len(p.out)
		if left <= 0 {
			return nil
		}
		n := min(max(left/pullPerSource, 1), len(todo), 64)
		round := todo[:n]
		todo = todo[n:]
		reqs := make([]shard.ClaimRequest, len(round))
		for i, src := range round {
			share := left / n
			if i < left%n {
				share++
			}
			reqs[i] = shard.ClaimRequest{Shard: src.shard, Queue: src.queue, N: share, NoAhead: true}
		}
		rc, cancel := p.s.rctx(ctx)
		res := p.s.store.ClaimMany(rc, reqs, p.req.Worker, p.nonce)
		cancel()
		var again []pullSource
		var back map[shard.ID][]shard.Finish
		for i, r := range res {
			if r.Err != nil {
				// The runs claimed so far are kept: they are returned; this source is not.
				if len(p.out) > 0 || i > 0 {
					p.s.logError(ctx, "claim runs", r.Err, "shard", int(reqs[i].Shard), "queue", reqs[i].Queue)
					continue
				}
				p.s.handBack(ctx, back)
				return p.s.storeAPIError(ctx, "claim", r.Err)
			}
			for k := range r.Runs {
				c := &r.Runs[k]
				if len(p.types) > 0 && !p.types[c.Type] {
					if back == nil {
						back = map[shard.ID][]shard.Finish{}
					}
					back[c.Shard] = append(back[c.Shard], shard.Finish{Member: c.Member, Token: c.Token, Outcome: shard.HandBack})
					p.skip[round[i]] = true
					continue
				}
				p.out = append(p.out, pulledRun{c: *c, queue: reqs[i].Queue})
			}
			switch {
			case p.skip[round[i]]:
			case r.More && len(r.Runs) >= reqs[i].N:
				again = append(again, round[i])
			case r.More:
				p.ahead = append(p.ahead, round[i])
			}
		}
		p.s.handBack(ctx, back)
		todo = append(again, todo...)
	}
	return nil
}

// handBack makes runs of other types ready again without using an attempt.
func (s *Server) handBack(ctx *fasthttp.RequestCtx, back map[shard.ID][]shard.Finish) {
	if len(back) == 0 {
		return
	}
	rc, cancel := s.rctx(ctx)
	defer cancel()
	for id, r := range s.store.FinishMany(rc, back) {
		if r.Err != nil {
			s.logError(ctx, "hand back runs of other types", r.Err, "shard", int(id))
		}
	}
}

func wireClaimed(c *shard.Claimed, queue string) ClaimedRun {
	p, b64 := encodePayload(c.Payload)
	return ClaimedRun{
		Run: c.Member, JobID: c.JobID, Queue: queue, Type: c.Type, Payload: p, PayloadBase64: b64,
		Attempt: c.Attempt, MaxAttempts: c.MaxAttempts, Due: c.Due.UTC(),
		Deadline: c.ClaimedAt.Add(c.Visibility).UTC(), Timeout: durString(c.Timeout),
		Visibility: durString(c.Visibility), Token: c.Token,
	}
}

// wireWorkflow fills the workflow fields of a node's claimed run.
func (r *pulledRun) wireWorkflow(w *ClaimedRun) {
	w.Workflow, w.Node = r.workflow, r.node
	for _, p := range r.parents {
		res, b64 := encodePayload(p.result)
		w.Parents = append(w.Parents, ParentResult{Node: p.node, Result: res, ResultBase64: b64})
	}
	w.ParentsOmitted = r.omitted
	w.ParentsError = r.parentsErr
}

// addParents reads the parents' results of the runs of workflow nodes among runs, all
// in three pipelined round trips (MaxParentResults bytes per run at most, the smaller
// results first; only those are read: shard.Store.ParentResultsUpTo). A read that
// fails leaves the run without them, saying so in ParentsError: the run is claimed
// already, and its worker can read them by the result endpoint.
func (s *Server) addParents(ctx context.Context, runs []pulledRun) {
	var ids []string
	var at []int
	for i := range runs {
		r := &runs[i]
		wf, node, ok := job.SplitNodeJobID(r.c.JobID)
		if !ok {
			continue
		}
		r.workflow, r.node = wf, node
		ids = append(ids, r.c.JobID)
		at = append(at, i)
	}
	if len(ids) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
	// Only the results that fit are read (a fan-in's may be thousands of MiB).
	results, omitted, errs := s.store.ParentResultsUpTo(rctx, ids, MaxParentResults)
	cancel()
	for k, i := range at {
		r, res := &runs[i], results[k]
		if err := errs[k]; err != nil {
			s.log.WarnContext(ctx, "claim: parents' results not read", "run", r.c.Member, "error", err)
			r.parentsErr = "the parents' results could not be read with the claim; read them with GET /v1/workflows/{id}/nodes/{node}/result"
			continue
		}
		names := make([]string, 0, len(res))
		for n := range res {
			names = append(names, n)
		}
		sort.Slice(names, func(a, b int) bool {
			if la, lb := len(res[names[a]]), len(res[names[b]]); la != lb {
				return la < lb
			}
			return names[a] < names[b]
		})
		left := MaxParentResults
		for _, n := range names {
			if b := res[n]; len(b) <= left {
				left -= len(b)
				r.parents = append(r.parents, parentResult{node: n, result: compactJSON(b)})
			} else {
				r.omitted = append(r.omitted, n)
			}
		}
		r.omitted = append(r.omitted, omitted[k]...)
		sort.Slice(r.parents, func(a, b int) bool { return r.parents[a].node < r.parents[b].node })
		sort.Strings(r.omitted)
	}
}

// compactJSON returns a parent's result as a claim carries it: JSON compacted, so that
// one with spaces or a trailing newline (a push target's body written by json.Encoder)
// comes as "result", as the result endpoint and a push delivery's Tock-Parent-Results
// take it, not as base64; other bytes as they are.
func compactJSON(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	// Compact fails on bytes that are no JSON: they stay as they are.
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil || bytes.Equal(buf.Bytes(), b) {
		return b
	}
	return buf.Bytes()
}

// heartbeatRuns serves POST /v1/runs:heartbeat.
func (s *Server) heartbeatRuns(ctx *fasthttp.RequestCtx, _ string) {
	if !requireJSON(ctx) {
		return
	}
	var req HeartbeatRequest
	if aerr := decodeJSON(ctx.PostBody(), &req); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	switch {
	case len(req.Runs) == 0:
		writeError(ctx, invalid("runs", "at least one run is required"))
		return
	case len(req.Runs) > MaxHeartbeatRuns:
		writeError(ctx, invalid("runs", "more than "+strconv.Itoa(MaxHeartbeatRuns)+" runs"))
		return
	}
	byShard := map[shard.ID][]int{}
	var order []shard.ID
	for i, h := range req.Runs {
		field := "runs[" + strconv.Itoa(i) + "]"
		if aerr := validRunField(field+".run", h.Run); aerr != nil {
			writeError(ctx, aerr)
			return
		}
		if aerr := validToken(field+".token", h.Token); aerr != nil {
			writeError(ctx, aerr)
			return
		}
		jobID, _, _ := shard.SplitMember(h.Run)
		id := s.store.ShardOf(jobID)
		if _, ok := byShard[id]; !ok {
			order = append(order, id)
		}
		byShard[id] = append(byShard[id], i)
	}
	out := HeartbeatReply{Runs: make([]HeartbeatRun, len(req.Runs))}
	for _, id := range order {
		idx := byShard[id]
		held := make([]shard.Held, len(idx))
		for k, i := range idx {
			held[k] = shard.Held{Member: req.Runs[i].Run, Token: req.Runs[i].Token}
		}
		rc, cancel := s.rctx(ctx)
		codes, err := s.store.Extend(rc, id, held)
		cancel()
		if err != nil {
			s.storeError(ctx, "heartbeat", err)
			return
		}
		for k, i := range idx {
			st := HeartbeatLost
			switch codes[k] {
			case shard.ExtendOK, shard.ExtendHold:
				// Hold concerns runs claimed ahead of their start, which this API never
				// hands out: the run is extended.
				st = HeartbeatExtended
			case shard.ExtendCancelled:
				st = HeartbeatCancelled
			}
			out.Runs[i] = HeartbeatRun{Run: req.Runs[i].Run, State: st}
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

// validRunField checks a run id sent in a body.
func validRunField(field, run string) *apiError {
	if aerr := validRun(run); aerr != nil {
		aerr.field = field
		return aerr
	}
	return nil
}

func validToken(field, tok string) *apiError {
	switch {
	case tok == "":
		return invalid(field, "the run's token is required")
	case len(tok) > maxToken:
		return invalid(field, "longer than "+strconv.Itoa(maxToken)+" bytes")
	}
	return nil
}

// ackRun serves POST /v1/runs/{run}:ack.
func (s *Server) ackRun(ctx *fasthttp.RequestCtx, run string) {
	var req AckRequest
	if !s.decodeRunBody(ctx, &req) {
		return
	}
	if aerr := validToken("token", req.Token); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	res, aerr := decodeResult(req.Result, req.ResultBase64 != "", req.ResultBase64, s.cfg.MaxResult)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	s.finishRun(ctx, run, shard.Finish{Token: req.Token, Outcome: shard.Succeeded, Result: res})
}

// failRun serves POST /v1/runs/{run}:fail.
func (s *Server) failRun(ctx *fasthttp.RequestCtx, run string) {
	var req FailRequest
	if !s.decodeRunBody(ctx, &req) {
		return
	}
	if aerr := validToken("token", req.Token); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	d, aerr := runDelay("retry_after", req.RetryAfter)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	msg := req.Error
	if msg == "" {
		msg = "failed by the worker"
	}
	s.finishRun(ctx, run, shard.Finish{Token: req.Token, Outcome: shard.Failed, Error: msg, Delay: d})
}

// snoozeRun serves POST /v1/runs/{run}:snooze.
func (s *Server) snoozeRun(ctx *fasthttp.RequestCtx, run string) {
	var req SnoozeRequest
	if !s.decodeRunBody(ctx, &req) {
		return
	}
	if aerr := validToken("token", req.Token); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if req.Delay == "" {
		writeError(ctx, invalid("delay", "a delay is required (such as \"30s\")"))
		return
	}
	d, aerr := runDelay("delay", req.Delay)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	s.finishRun(ctx, run, shard.Finish{Token: req.Token, Outcome: shard.Snoozed, Delay: d})
}

// cancelRun serves POST /v1/runs/{run}:cancel.
func (s *Server) cancelRun(ctx *fasthttp.RequestCtx, run string) {
	var req CancelRunRequest
	if !s.decodeRunBody(ctx, &req) {
		return
	}
	if aerr := validToken("token", req.Token); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	msg := req.Error
	if msg == "" {
		msg = "cancelled by the worker"
	}
	s.finishRun(ctx, run, shard.Finish{Token: req.Token, Outcome: shard.Cancelled, Error: msg})
}

func (s *Server) decodeRunBody(ctx *fasthttp.RequestCtx, v any) bool {
	if !requireJSON(ctx) {
		return false
	}
	if aerr := decodeJSON(ctx.PostBody(), v); aerr != nil {
		writeError(ctx, aerr)
		return false
	}
	return true
}

func runDelay(field, v string) (time.Duration, *apiError) {
	d, aerr := parseDuration(field, v)
	if aerr != nil {
		return 0, aerr
	}
	if d < 0 || d > maxRunDelay {
		return 0, invalid(field, "must be 0 to "+maxRunDelay.String()+", got "+strconv.Quote(v))
	}
	return d, nil
}

// decodeResult returns the result bytes of raw (a JSON value) or b64 (base64), at most
// one of which may be set; nil when neither is.
func decodeResult(raw json.RawMessage, hasB64 bool, b64 string, maxResult int) ([]byte, *apiError) {
	if string(raw) == "null" {
		raw = nil
	}
	if len(raw) > 0 && hasB64 {
		return nil, invalid("result", "only one of result and result_base64 may be set")
	}
	var p []byte
	field := "result"
	if hasB64 {
		field = "result_base64"
		if n := len(b64) / 4 * 3; n > maxResult+3 {
			return nil, tooLarge("result_base64", n, maxResult)
		}
		var err error
		if p, err = decodeBase64(b64); err != nil {
			return nil, invalid("result_base64", "not valid base64: "+err.Error())
		}
		if p == nil {
			p = []byte{}
		}
	} else if len(raw) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, invalid("result", "malformed JSON: "+err.Error())
		}
		p = buf.Bytes()
	}
	if len(p) > maxResult {
		return nil, tooLarge(field, len(p), maxResult)
	}
	return p, nil
}

// finishRun reports the end of an attempt of run; dispatch has checked run.
func (s *Server) finishRun(ctx *fasthttp.RequestCtx, run string, f shard.Finish) {
	f.Member = run
	jobID, _, _ := shard.SplitMember(run)
	rc, cancel := s.rctx(ctx)
	defer cancel()
	errs, err := s.store.FinishRuns(rc, s.store.ShardOf(jobID), []shard.Finish{f})
	if err == nil {
		err = errs[0]
	}
	if errors.Is(err, shard.ErrTokenMismatch) {
		// Not held with this token: an unknown run is 404, a known one 409.
		if _, gerr := s.store.Get(rc, jobID); errors.Is(gerr, shard.ErrNotFound) {
			writeError(ctx, &apiError{status: 404, code: CodeNotFound, msg: "run " + strconv.Quote(run) + " not found"})
			return
		}
		writeError(ctx, &apiError{status: 409, code: CodeTokenMismatch, field: "token",
			msg: "run " + strconv.Quote(run) + " is not held with this token: it was redelivered to another worker after its deadline, or it ended already"})
		return
	}
	if err != nil {
		s.storeError(ctx, "run "+strconv.Quote(run), err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, &RunReply{Run: run, Outcome: string(f.Outcome)})
}

// ackRuns serves POST /v1/runs:ack: the successes of several runs, one finish_runs call
// per shard in one pipeline.
func (s *Server) ackRuns(ctx *fasthttp.RequestCtx, _ string) {
	if !requireJSON(ctx) {
		return
	}
	req, ok := decodeAckRuns(ctx.PostBody())
	if !ok {
		if aerr := decodeJSON(ctx.PostBody(), &req); aerr != nil {
			writeError(ctx, aerr)
			return
		}
	}
	if aerr := checkReportRuns(len(req.Runs)); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	out := make([]RunResult, len(req.Runs))
	fs := make([]shard.Finish, len(req.Runs))
	for i := range req.Runs {
		r := &req.Runs[i]
		out[i].Run = r.Run
		field := "runs[" + strconv.Itoa(i) + "]"
		if aerr := checkReport(field, r.Run, r.Token); aerr != nil {
			out[i].refuse(aerr)
			continue
		}
		res, aerr := decodeResult(r.Result, r.ResultBase64 != "", r.ResultBase64, s.cfg.MaxResult)
		if aerr != nil {
			aerr.field = field + "." + aerr.field
			out[i].refuse(aerr)
			continue
		}
		fs[i] = shard.Finish{Member: r.Run, Token: r.Token, Outcome: shard.Succeeded, Result: res}
	}
	s.reportRuns(ctx, fs, out)
}

// failRuns serves POST /v1/runs:fail: the failures of several runs, as ackRuns.
func (s *Server) failRuns(ctx *fasthttp.RequestCtx, _ string) {
	var req FailRunsRequest
	if !s.decodeRunBody(ctx, &req) {
		return
	}
	if aerr := checkReportRuns(len(req.Runs)); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	out := make([]RunResult, len(req.Runs))
	fs := make([]shard.Finish, len(req.Runs))
	for i := range req.Runs {
		r := &req.Runs[i]
		out[i].Run = r.Run
		field := "runs[" + strconv.Itoa(i) + "]"
		if aerr := checkReport(field, r.Run, r.Token); aerr != nil {
			out[i].refuse(aerr)
			continue
		}
		d, aerr := runDelay(field+".retry_after", r.RetryAfter)
		if aerr != nil {
			out[i].refuse(aerr)
			continue
		}
		msg := r.Error
		if msg == "" {
			msg = "failed by the worker"
		}
		fs[i] = shard.Finish{Member: r.Run, Token: r.Token, Outcome: shard.Failed, Error: msg, Delay: d}
	}
	s.reportRuns(ctx, fs, out)
}

// checkReportRuns bounds the runs of a batch report.
func checkReportRuns(n int) *apiError {
	switch {
	case n == 0:
		return invalid("runs", "at least one run is required")
	case n > MaxReportRuns:
		return invalid("runs", strconv.Itoa(n)+" runs: at most "+strconv.Itoa(MaxReportRuns)+" may be reported in one call")
	}
	return nil
}

// checkReport checks the run and token of one run of a batch report: a run id that
// cannot exist is not found, as in the run's own call.
func checkReport(field, run, token string) *apiError {
	if validRun(run) != nil {
		return &apiError{status: 404, code: CodeNotFound, field: field + ".run", msg: "run " + strconv.Quote(run) + " not found: a run is <job id>:<due ms>"}
	}
	return validToken(field+".token", token)
}

func (r *RunResult) refuse(aerr *apiError) {
	r.Status, r.Error = aerr.status, aerr.wire()
}

// reportRuns records fs, the reports of a batch (those with a Member: the others are
// refused in out already) with one finish_runs call per shard in one pipeline, and
// answers out. A run not held with its token is refused with 409, or 404 when its job
// does not exist, as in its own call.
func (s *Server) reportRuns(ctx *fasthttp.RequestCtx, fs []shard.Finish, out []RunResult) {
	byShard := map[shard.ID][]shard.Finish{}
	idx := map[shard.ID][]int{}
	for i := range fs {
		if fs[i].Member == "" {
			continue
		}
		jobID, _, _ := shard.SplitMember(fs[i].Member)
		id := s.store.ShardOf(jobID)
		byShard[id] = append(byShard[id], fs[i])
		idx[id] = append(idx[id], i)
	}
	var mismatch []int
	if len(byShard) > 0 {
		rc, cancel := s.rctx(ctx)
		finished := s.store.FinishMany(rc, byShard)
		cancel()
		for id, r := range finished {
			var shardErr *apiError
			if r.Err != nil {
				shardErr = s.storeAPIError(ctx, "runs of shard "+strconv.Itoa(int(id)), r.Err)
			}
			for k, i := range idx[id] {
				var err error
				if k < len(r.Errs) {
					err = r.Errs[k]
				}
				switch {
				case shardErr != nil:
					out[i].refuse(shardErr)
				case err == nil:
					out[i].Status, out[i].Outcome = 200, string(fs[i].Outcome)
				case errors.Is(err, shard.ErrTokenMismatch):
					mismatch = append(mismatch, i)
				default:
					out[i].refuse(s.storeAPIError(ctx, "run "+strconv.Quote(fs[i].Member), err))
				}
			}
		}
	}
	// Not held with this token: an unknown run is 404, a known one 409. Rare: a read per
	// job.
	known := map[string]*apiError{}
	for _, i := range mismatch {
		run := fs[i].Member
		jobID, _, _ := shard.SplitMember(run)
		gerr, seen := known[jobID]
		if !seen {
			rc, cancel := s.rctx(ctx)
			_, err := s.store.Get(rc, jobID)
			cancel()
			if err != nil && !errors.Is(err, shard.ErrNotFound) {
				gerr = s.storeAPIError(ctx, "job "+strconv.Quote(jobID), err)
			} else if err != nil {
				gerr = &apiError{status: 404, code: CodeNotFound}
			}
			known[jobID] = gerr
		}
		switch {
		case gerr == nil:
			out[i].refuse(&apiError{status: 409, code: CodeTokenMismatch, field: "runs[" + strconv.Itoa(i) + "].token",
				msg: "run " + strconv.Quote(run) + " is not held with this token: it was redelivered to another worker after its deadline, or it ended already"})
		case gerr.status == 404:
			out[i].refuse(&apiError{status: 404, code: CodeNotFound, msg: "run " + strconv.Quote(run) + " not found"})
		default:
			out[i].refuse(gerr)
		}
	}
	reply := RunsReply{Runs: out}
	for i := range out {
		if out[i].Status == 200 {
			reply.Done++
		} else {
			reply.Refused++
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, &reply)
}
