package shard

import (
	"context"
	"errors"
	"time"

	"github.com/tockhq/tock/job"
)

var errTODO = errors.New("not implemented yet")

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
	// Next continues the listing; "" when it is complete. A page may hold fewer than
	// Limit jobs (even none) while Next is not empty: the scan stops after a bounded
	// amount of work per call.
	Next string
}

// List pages through the namespace's jobs, shard node by shard node (SCAN: a job that
// exists throughout the listing is returned at least once; one created or deleted
// meanwhile may or may not be). A cursor that does not decode is a *job.FieldError on
// "cursor".
func (s *Store) List(ctx context.Context, f ListFilter) (Page, error) {
	return Page{}, errTODO
}

// Update changes parts of a job's definition: the fields that are not nil. A changed
// schedule moves the job's next run (a run already ready or running is not touched).
// It returns the job as stored afterwards. Errors: ErrNotFound, a *job.FieldError for
// an invalid change, a *StateError for a job that has finished.
type Update struct {
	Schedule *job.Schedule
	Payload  *[]byte
	Priority *int
	Retry    *job.RetryPolicy
}

// Update applies u to job jobID (see Update).
func (s *Store) Update(ctx context.Context, jobID string, u Update) (*Info, error) {
	return nil, errTODO
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

// Dead pages through the dead-letter sets of all shards, oldest death first within a
// shard; queue "" means every queue. limit defaults to 100 (at most 1000). next is ""
// when the listing is complete.
func (s *Store) Dead(ctx context.Context, queue string, limit int, cursor string) (runs []DeadRun, next string, err error) {
	return nil, "", errTODO
}

// RequeueDead makes a dead run ready again with a fresh set of attempts. ErrNotFound
// when member is not in the dead-letter set.
func (s *Store) RequeueDead(ctx context.Context, member string) error {
	return errTODO
}

// DeleteDead removes a run from the dead-letter set for good. ErrNotFound when member is
// not there.
func (s *Store) DeleteDead(ctx context.Context, member string) error {
	return errTODO
}

// QueueStats are one queue's counts over all shards.
type QueueStats struct {
	Queue     string
	Paused    bool
	Scheduled int64 // runs waiting for their due time (first runs and retries)
	Ready     int64
	InFlight  int64
	Dead      int64
	Fired     int64 // runs fired since the namespace was created
}

// Queues returns the figures of every queue that ever held a job, sorted by name.
func (s *Store) Queues(ctx context.Context) ([]QueueStats, error) {
	return nil, errTODO
}

// Backlog returns the runs ready or in flight over all shards and queues.
func (s *Store) Backlog(ctx context.Context) (int64, error) {
	return 0, errTODO
}

// PauseQueue stops workers from claiming from queue (runs still fire into its ready
// sets); changed is false when it was paused already.
func (s *Store) PauseQueue(ctx context.Context, queue string) (changed bool, err error) {
	return false, errTODO
}

// ResumeQueue undoes PauseQueue.
func (s *Store) ResumeQueue(ctx context.Context, queue string) (changed bool, err error) {
	return false, errTODO
}

// PausedQueues returns the paused queues.
func (s *Store) PausedQueues(ctx context.Context) (map[string]bool, error) {
	return nil, errTODO
}
