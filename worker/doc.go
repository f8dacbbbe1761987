// Package worker is tock's Go worker SDK: register handlers by job type, choose queues,
// concurrency and prefetch, then Start. A Worker claims runs in batches from the shards
// that have work (woken by signals, with a slow sweep over all shards as a safety net),
// runs each handler with a context that carries the run's timeout and is cancelled when
// the job is cancelled or the worker stops, heartbeats long runs, and acks or fails each
// run. Stop stops claiming, lets running handlers finish until its ctx ends, and hands
// back the rest without using an attempt. A Worker does not claim from a queue that an
// operator paused (shard.Store.PauseQueue), learning it from a signal or, if that is
// lost, from its next sweep; runs already claimed go on, and claiming restarts as soon
// as the queue is resumed.
//
// The package keeps one file per duty:
//
//   - doc.go: this comment.
//   - config.go: Config, its defaults and validation, and what it hands out: the
//     Metrics interface, Outcome and Result (for ObserveFunc).
//   - worker.go: the Worker and its held-run state (active), New, Handle, Start and
//     Stop.
//   - claim.go: the claim loop: which sources are hot or late, how many runs may be
//     claimed (slots, prefetch, Hold), claim rounds, paused queues, and the release of
//     runs held until their start time.
//   - clock.go: clockRef, which maps a shard's Redis clock to local time, so a run
//     fired ahead never starts before its time.
//   - run.go: what a handler sees (Run, Handler, Cancel, Snooze) and the executor that
//     runs handlers and queues their outcomes.
//   - signal.go: the signal subscription (ready, cancel, hold and queue channels) and
//     the cancelling or handing back of held runs that signals and heartbeats ask for.
//   - heartbeat.go: the heartbeat that extends the deadlines of held runs.
//   - report.go: the reporter, which sends outcomes to Redis in batches per shard, and
//     the metrics and ObserveFunc calls made once an outcome is reported.
package worker
