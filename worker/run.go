package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Run is one attempt of a run, as a handler sees it.
type Run struct {
	// ID identifies the run across attempts (`<jobID>:<due ms>`): use it as the
	// idempotency key of the handler's side effects.
	ID          string
	JobID       string
	Queue       string
	Type        string
	Payload     []byte
	Due         time.Time // when the run was due
	Attempt     int       // 1-based
	MaxAttempts int
	Shard       shard.ID
	ClaimedAt   time.Time // Redis time of the claim
	// StartedAt is when the handler started, on the Redis clock: ClaimedAt plus the
	// local time from the claim's reply to the start, so never later than the true
	// time. It is never before Due (nor before a retry's retry time): a run fired ahead
	// of its time (dispatcher.Config.Lead) waits in the worker until then.
	StartedAt time.Time
	// Target is the job's push target (jobs of type job.PushType, which the push
	// executor delivers), nil for other jobs.
	Target *job.Target

	result []byte       // SetResult
	store  *shard.Store // ParentResults
}

// Workflow returns the workflow and node of a run of a workflow's node; ok is false for
// a run of any other job.
func (r *Run) Workflow() (workflow, node string, ok bool) { return job.SplitNodeJobID(r.JobID) }

// ParentResults returns, for a run of a workflow's node, the results of its parents that
// succeeded with one (WithResult or SetResult), by parent node id; nil for a run of any
// other job or a node without parents.
func (r *Run) ParentResults(ctx context.Context) (map[string][]byte, error) {
	if r.store == nil {
		return nil, nil
	}
	return r.store.ParentResults(ctx, r.JobID)
}

// ParentResultsUpTo is ParentResults for a handler that uses at most max bytes of its
// parents' results (a push delivery's header): the results that fit, the smaller first
// (by size, then node id), and the parents whose results did not fit, sorted. Only the
// results that fit are read (shard.Store.ParentResultsUpTo).
func (r *Run) ParentResultsUpTo(ctx context.Context, max int) (map[string][]byte, []string, error) {
	if r.store == nil {
		return nil, nil, nil
	}
	res, omitted, errs := r.store.ParentResultsUpTo(ctx, []string{r.JobID}, max)
	return res[0], omitted[0], errs[0]
}

type resultValue struct{ b []byte }

func (resultValue) Error() string { return "result (not an error)" }

// WithResult ends a handler with success and result b, as SetResult(b) and a nil error
// do: `return worker.WithResult(b)`. A workflow's nodes see it as their parent's result
// (Run.ParentResults). (Result is the name of what a worker's observer sees.)
func WithResult(b []byte) error { return resultValue{b} }

// SetResult sets the result of the run: when the handler then returns nil, b is kept
// with the run for the job's retention (job.Run.Result; the API's run history shows it)
// and a recurring job keeps those of its newest runs. b is at most shard.MaxResult
// bytes: a larger result fails the attempt. A handler that returns an error stores no
// result. Call it from the handler's goroutine only.
func (r *Run) SetResult(b []byte) { r.result = b }

// Handler runs jobs of one type. Work's ctx ends at the job's timeout, when the job is
// cancelled, or when the worker stops. A nil error acks the run (with the result set by
// Run.SetResult, if any); other errors fail the
// attempt and are retried by the job's policy, except those made by Cancel and Snooze.
type Handler interface {
	Work(ctx context.Context, r *Run) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, r *Run) error

// Work calls f.
func (f HandlerFunc) Work(ctx context.Context, r *Run) error { return f(ctx, r) }

type cancelError struct{ err error }

func (e *cancelError) Error() string { return "cancel: " + e.err.Error() }
func (e *cancelError) Unwrap() error { return e.err }

// Cancel wraps err so that the run is not retried: it ends cancelled (a one-time job
// ends in state cancelled).
func Cancel(err error) error {
	if err == nil {
		err = errors.New("cancelled by handler")
	}
	return &cancelError{err}
}

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return "snooze " + e.d.String() }

// Snooze asks for the run to be tried again after d without using up an attempt.
func Snooze(d time.Duration) error { return &snoozeError{max(d, 0)} }

// execute runs handlers for claimed runs until the runs channel closes.
func (w *Worker) execute() {
	for a := range w.runs {
		w.mu.Lock()
		stopping := w.stopping
		w.mu.Unlock()
		if stopping {
			// Claimed but never started: hand back without using an attempt.
			w.finish(a, nil, shard.Finish{Outcome: shard.HandBack}, time.Time{}, time.Time{}, nil)
			continue
		}
		w.work(a)
	}
}

func (w *Worker) work(a *active) {
	r := &Run{
		ID: a.c.Member, JobID: a.c.JobID, Queue: a.queue, Type: a.c.Type, Payload: a.c.Payload,
		Due: a.c.Due, Attempt: a.c.Attempt, MaxAttempts: a.c.MaxAttempts, Shard: a.c.Shard,
		ClaimedAt: a.c.ClaimedAt, Target: a.c.Target, store: w.store,
	}
	ctx, cancel := context.WithCancelCause(w.baseCtx)
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, a.c.Timeout, fmt.Errorf("job timeout of %s exceeded", a.c.Timeout))
	w.mu.Lock()
	cancelled := a.cancelled
	if cancelled == nil {
		a.cancel, a.started = cancel, true // from here on cancelRun cancels ctx
	}
	w.mu.Unlock()
	if cancelled != nil {
		// Cancelled before its handler started (say, while it waited for its due time):
		// the handler does not run.
		cancelTimeout()
		cancel(nil)
		if errors.Is(cancelled, shard.ErrTokenMismatch) {
			w.done(a) // redelivered to another worker: nothing to report
			w.cfg.Metrics.RunFinished(a.queue, OutcomeRejected, max(a.c.ClaimedAt.Sub(a.c.Due), 0), 0)
			return
		}
		if errors.Is(cancelled, errHeldBack) {
			// Ready again (or parked, when its job is paused) without using an attempt.
			w.finish(a, nil, shard.Finish{Outcome: shard.HandBack}, time.Time{}, time.Time{}, nil)
			return
		}
		w.finish(a, nil, shard.Finish{Outcome: shard.Cancelled, Error: cancelled.Error()}, time.Time{}, time.Time{}, nil)
		return
	}
	started := time.Now()
	r.StartedAt = a.clock.redisAt(started)
	err := w.call(ctx, r)
	ended := time.Now()
	cause := context.Cause(ctx)
	cancelTimeout()
	cancel(nil)

	var rv resultValue
	if errors.As(err, &rv) {
		err, r.result = nil, rv.b
	}
	f := shard.Finish{Member: a.c.Member, Token: a.c.Token}
	var ce *cancelError
	var se *snoozeError
	switch {
	case errors.Is(cause, errShutdown):
		f.Outcome = shard.HandBack
	case errors.Is(cause, shard.ErrTokenMismatch):
		// Lost the run to another worker; nothing to report (it would be rejected).
		w.done(a)
		w.cfg.Metrics.RunFinished(a.queue, OutcomeRejected, a.lateness(started), ended.Sub(started))
		w.observe(Result{Run: r, Started: started, Finished: ended, Outcome: OutcomeFailed, Err: err, Rejected: true})
		return
	case err == nil && len(r.result) > shard.MaxResult:
		f.Outcome = shard.Failed
		f.Error = fmt.Sprintf("the handler's result of %d bytes is over the limit of %d bytes", len(r.result), shard.MaxResult)
	case err == nil:
		f.Outcome, f.Result = shard.Succeeded, r.result
	case errors.Is(cause, errJobCancelled) || errors.As(err, &ce):
		f.Outcome, f.Error = shard.Cancelled, err.Error()
	case errors.As(err, &se):
		f.Outcome, f.Delay = shard.Snoozed, se.d
	default:
		f.Outcome, f.Error = shard.Failed, err.Error()
		if cause != nil && ctx.Err() != nil && !errors.Is(err, cause) {
			f.Error = cause.Error() + ": " + err.Error()
		}
	}
	w.finish(a, r, f, started, ended, err)
}

// lateness is the time from the run's due time to started (local), on the Redis clock.
func (a *active) lateness(started time.Time) time.Duration {
	return a.clock.redisAt(started).Sub(a.c.Due)
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, r *Run) (err error) {
	w.mu.Lock()
	h := w.handlers[r.Type]
	w.mu.Unlock()
	if h == nil {
		return fmt.Errorf("no handler registered for job type %q on worker %s", r.Type, w.cfg.ID)
	}
	defer func() {
		if p := recover(); p != nil {
			stack := string(debug.Stack())
			if len(stack) > 1500 {
				stack = stack[:1500]
			}
			err = fmt.Errorf("handler panicked: %v\n%s", p, stack)
		}
	}()
	return h.Work(ctx, r)
}

// finish queues the attempt's report for the reporter.
// started and ended are zero for a run whose handler never started.
func (w *Worker) finish(a *active, r *Run, f shard.Finish, started, ended time.Time, herr error) {
	f.Member, f.Token = a.c.Member, a.c.Token
	// The slot is free for the next claim from here on. Marked before the report is
	// queued, so the reporter's done always sees it.
	w.mu.Lock()
	a.reporting = true
	w.reporting++
	if !started.IsZero() {
		w.observeDuration(ended.Sub(started))
	}
	w.mu.Unlock()
	w.poke()
	w.reports <- report{a: a, f: f, run: r, started: started, ended: ended, err: herr}
}

// HandleWorkflows makes the worker start scheduled workflows' instances: it handles the
// runs of their definitions (job.WorkflowType), each of which creates the instance of its
// occurrence (shard.Store.StartInstance; a second start of the same occurrence finds it),
// and claims from their queue, job.WorkflowQueue, whether Config.Queues names it or not.
// The run's result says what it did. tock server runs one with its dispatcher. Like
// Handle, it panics after Start.
func (w *Worker) HandleWorkflows() {
	w.mu.Lock()
	if !w.started && !w.queues[job.WorkflowQueue] {
		w.queues[job.WorkflowQueue] = true
		w.cfg.Queues = append(slices.Clip(w.cfg.Queues), job.WorkflowQueue)
	}
	w.mu.Unlock()
	w.HandleFunc(job.WorkflowType, func(ctx context.Context, r *Run) error {
		res, err := w.store.StartInstance(ctx, r.JobID, r.Due, r.Payload)
		if err != nil {
			return err
		}
		what := "created"
		switch {
		case res.Skipped:
			what = "skipped: an instance is running (overlap policy)"
		case res.Held:
			what = "buffered: starts when the running instance ends"
		case !res.Created:
			what = "existed"
		}
		r.SetResult([]byte(`{"instance":"` + res.ID + `","outcome":"` + what + `"}`))
		return nil
	})
}
