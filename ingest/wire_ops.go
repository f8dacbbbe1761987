package ingest

import "time"

// The JSON shapes of the operations endpoints that the dashboard reads (and scripts
// may): schedule previews, the cluster view, per-minute figures and bulk actions.

// ScheduleFire is one fire time of GET /v1/schedules:preview.
type ScheduleFire struct {
	At time.Time `json:"at"` // in the schedule's zone
	// DST is set where a daylight-saving change matters: "moved" (the wall time does not
	// exist that day: fires right after the jump), "repeat_skipped" (the wall time occurs
	// twice: fires on the first pass only), "repeated" (a wildcard-hour expression fires
	// in both passes) or "gap_skipped" (occurrences in a skipped hour did not fire).
	DST  string `json:"dst,omitempty"`
	Note string `json:"note,omitempty"` // DST in words
}

// SchedulePreview is the reply of GET /v1/schedules:preview.
type SchedulePreview struct {
	Cron     string         `json:"cron"`
	Timezone string         `json:"timezone"`
	Fires    []ScheduleFire `json:"fires"`
}

// ClusterDispatcher is a live dispatcher and the shards whose lease it holds.
type ClusterDispatcher struct {
	Name    string    `json:"name"`
	Expires time.Time `json:"expires"`
	Shards  []int     `json:"shards"`
}

// ClusterShard is one shard: its lease and counts.
type ClusterShard struct {
	Shard      int    `json:"shard"`
	Owner      string `json:"owner,omitempty"`
	Epoch      int64  `json:"epoch,omitempty"`
	LeaseTTLMs int64  `json:"lease_ttl_ms,omitempty"`
	Scheduled  int64  `json:"scheduled"`
	Ready      int64  `json:"ready"`
	InFlight   int64  `json:"in_flight"`
	Dead       int64  `json:"dead"`
}

// ClusterWorker is a worker seen in the last 5 minutes.
type ClusterWorker struct {
	ID       string    `json:"id"`
	LastSeen time.Time `json:"last_seen"`
}

// ClusterNode is a Redis node.
type ClusterNode struct {
	Addr string `json:"addr"`
	Role string `json:"role"`
}

// Cluster is the reply of GET /v1/cluster.
type Cluster struct {
	Dispatchers []ClusterDispatcher `json:"dispatchers"`
	Shards      []ClusterShard      `json:"shards"`
	Workers     []ClusterWorker     `json:"workers"`
	Nodes       []ClusterNode       `json:"nodes"`
}

// MinuteFigures are one queue's figures of one minute.
type MinuteFigures struct {
	Minute time.Time `json:"minute"`
	Fired  *int64    `json:"fired"` // null when no dispatcher sampled the minute
	Ended  int64     `json:"ended"` // runs whose attempt ended: the lateness counts these
	// Lateness quantiles (ms), as the upper bound of the histogram bucket they fall in;
	// null without runs.
	LatenessP50Ms *float64 `json:"lateness_p50_ms"`
	LatenessP99Ms *float64 `json:"lateness_p99_ms"`
	Lateness      []int64  `json:"lateness"` // histogram: counts per FigureList.BucketsMs bucket
}

// FigureSummary sums the last 5 minutes of one queue.
type FigureSummary struct {
	FiresPerSecond *float64 `json:"fires_per_second"`
	Ended          int64    `json:"ended"`
	LatenessP50Ms  *float64 `json:"lateness_p50_ms"`
	LatenessP99Ms  *float64 `json:"lateness_p99_ms"`
}

// QueueFigures are one queue's per-minute figures, oldest first.
type QueueFigures struct {
	Queue   string          `json:"queue"`
	Last5m  FigureSummary   `json:"last_5m"`
	Minutes []MinuteFigures `json:"minutes"`
}

// FigureList is the reply of GET /v1/figures.
type FigureList struct {
	// BucketsMs are the upper bounds of the lateness histogram's buckets; the last
	// bucket (one more than the bounds) holds everything above.
	BucketsMs []float64      `json:"lateness_buckets_ms"`
	Queues    []QueueFigures `json:"queues"`
}

// JobFilter selects jobs for a listing or a bulk action; empty fields match all.
type JobFilter struct {
	Queue  string `json:"queue,omitempty"`
	State  string `json:"state,omitempty"`
	Type   string `json:"type,omitempty"`
	Prefix string `json:"prefix,omitempty"` // of the job id
}

// BulkRequest is the body of POST /v1/jobs:bulk and /v1/dead:bulk: an action on
// listed ids (at most 1000) or on one page of the jobs (dead runs) that match Filter.
// With a filter, call again with Cursor set to the reply's NextCursor until it is
// empty: each call does a bounded amount of work.
type BulkRequest struct {
	Action string     `json:"action"` // jobs: cancel, pause, resume, trigger, delete; dead: requeue, delete
	IDs    []string   `json:"ids,omitempty"`
	Filter *JobFilter `json:"filter,omitempty"`
	Cursor string     `json:"cursor,omitempty"`
}

// BulkError is the error of one item of a bulk action.
type BulkError struct {
	ID    string `json:"id"`
	Error Error  `json:"error"`
}

// Progress says how far a paged search got: Done of Total parts (the shards' packed
// job hashes, then each Redis primary's keyspace).
type Progress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// BulkReply is the reply of a bulk action (one call).
type BulkReply struct {
	Matched    int         `json:"matched"` // items the action was applied to
	Changed    int         `json:"changed"`
	Failed     int         `json:"failed"`
	Errors     []BulkError `json:"errors,omitempty"` // the first 20 failures
	NextCursor string      `json:"next_cursor,omitempty"`
	Progress   *Progress   `json:"progress,omitempty"`
}
