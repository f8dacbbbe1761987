package ingest

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// DefaultPreview is the fire times GET /v1/schedules:preview returns without count.
const DefaultPreview = 10

// previewSchedule serves GET /v1/schedules:preview?cron=&timezone=&count=&after=.
func (s *Server) previewSchedule(ctx *fasthttp.RequestCtx, _ string) {
	args := ctx.QueryArgs()
	expr, tz := string(args.Peek("cron")), string(args.Peek("timezone"))
	if strings.TrimSpace(expr) == "" {
		writeError(ctx, invalid("cron", "a cron expression is required, e.g. cron=30+2+*+*+*"))
		return
	}
	c, err := job.ParseCron(expr, tz)
	if err != nil {
		field := "cron"
		if strings.Contains(err.Error(), "time zone") {
			field = "timezone"
		}
		writeError(ctx, invalid(field, err.Error()))
		return
	}
	n := DefaultPreview
	if v := args.Peek("count"); len(v) > 0 {
		if n, err = strconv.Atoi(string(v)); err != nil || n < 1 || n > job.MaxPreview {
			writeError(ctx, invalid("count", "must be an integer from 1 to "+strconv.Itoa(job.MaxPreview)+", got "+strconv.Quote(string(v))))
			return
		}
	}
	after := s.now()
	if v := args.Peek("after"); len(v) > 0 {
		if after, err = time.Parse(time.RFC3339Nano, string(v)); err != nil {
			writeError(ctx, invalid("after", "must be an RFC 3339 time, got "+strconv.Quote(string(v))))
			return
		}
	}
	out := SchedulePreview{Cron: c.Expr(), Timezone: c.Location().String()}
	for _, f := range c.Preview(after, n) {
		out.Fires = append(out.Fires, ScheduleFire{At: f.At, DST: f.DST, Note: f.Note})
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

// cluster serves GET /v1/cluster.
func (s *Server) cluster(ctx *fasthttp.RequestCtx, _ string) {
	rc, cancel := s.rctx(ctx)
	v, err := s.store.Cluster(rc)
	cancel()
	if err != nil {
		s.storeError(ctx, "cluster", err)
		return
	}
	out := Cluster{Dispatchers: []ClusterDispatcher{}, Shards: make([]ClusterShard, len(v.Shards)),
		Workers: []ClusterWorker{}, Nodes: []ClusterNode{}}
	for _, m := range v.Members {
		d := ClusterDispatcher{Name: m.Name, Expires: m.Expires.UTC(), Shards: []int{}}
		for _, id := range m.Shards {
			d.Shards = append(d.Shards, int(id))
		}
		out.Dispatchers = append(out.Dispatchers, d)
	}
	for i, sv := range v.Shards {
		out.Shards[i] = ClusterShard{Shard: int(sv.Shard), Owner: sv.Owner, Epoch: sv.Epoch, LeaseTTLMs: sv.LeaseTTL.Milliseconds(),
			Scheduled: sv.Scheduled, Ready: sv.Ready, InFlight: sv.InFlight, Dead: sv.Dead}
	}
	for _, w := range v.Workers {
		out.Workers = append(out.Workers, ClusterWorker{ID: w.ID, LastSeen: w.LastSeen.UTC()})
	}
	for _, n := range v.Nodes {
		out.Nodes = append(out.Nodes, ClusterNode{Addr: n.Addr, Role: n.Role})
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

// figures serves GET /v1/figures?minutes=&queue=.
func (s *Server) figures(ctx *fasthttp.RequestCtx, _ string) {
	args := ctx.QueryArgs()
	minutes := 60
	if v := args.Peek("minutes"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 5 || n > shard.MaxFigureMinutes {
			writeError(ctx, invalid("minutes", "must be an integer from 5 to "+strconv.Itoa(shard.MaxFigureMinutes)+", got "+strconv.Quote(string(v))))
			return
		}
		minutes = n
	}
	var queues []string
	if q := args.Peek("queue"); len(q) > 0 {
		if err := job.ValidateID("queue", string(q), job.MaxQueueLen); err != nil {
			writeError(ctx, normalizeError(err))
			return
		}
		queues = []string{string(q)}
	}
	now := time.Now()
	rc, cancel := s.rctx(ctx)
	figs, err := s.store.Figures(rc, queues, now.Add(-time.Duration(minutes-1)*time.Minute), now)
	cancel()
	if err != nil {
		s.storeError(ctx, "figures", err)
		return
	}
	out := FigureList{Queues: make([]QueueFigures, len(figs))}
	for _, b := range shard.LatenessBounds {
		out.BucketsMs = append(out.BucketsMs, float64(b)/float64(time.Millisecond))
	}
	for i, qf := range figs {
		out.Queues[i] = wireFigures(qf, now)
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

func quantileMs(h [shard.NumLatenessBuckets]int64, q float64) *float64 {
	d, ok := shard.LatenessQuantile(h, q)
	if !ok {
		return nil
	}
	v := float64(d) / float64(time.Millisecond)
	return &v
}

// wireFigures converts one queue's minutes and sums the last 5 (the current minute
// counts for the part of it that has passed).
func wireFigures(qf shard.QueueFigures, now time.Time) QueueFigures {
	out := QueueFigures{Queue: qf.Queue, Minutes: make([]MinuteFigures, len(qf.Minutes))}
	var hist [shard.NumLatenessBuckets]int64
	var fired int64
	var span time.Duration
	known := false
	for i, m := range qf.Minutes {
		w := MinuteFigures{Minute: m.Minute.UTC(), Ended: m.Ended, Lateness: m.Lateness[:],
			LatenessP50Ms: quantileMs(m.Lateness, 0.5), LatenessP99Ms: quantileMs(m.Lateness, 0.99)}
		if m.Fired >= 0 {
			f := m.Fired
			w.Fired = &f
		}
		out.Minutes[i] = w
		if i < len(qf.Minutes)-5 {
			continue
		}
		for b, n := range m.Lateness {
			hist[b] += n
		}
		out.Last5m.Ended += m.Ended
		if m.Fired >= 0 {
			known = true
			fired += m.Fired
			span += min(now.Sub(m.Minute), time.Minute)
		}
	}
	if known && span > 0 {
		r := float64(fired) / span.Seconds()
		out.Last5m.FiresPerSecond = &r
	}
	out.Last5m.LatenessP50Ms = quantileMs(hist, 0.5)
	out.Last5m.LatenessP99Ms = quantileMs(hist, 0.99)
	return out
}

// Bulk limits.
const (
	maxBulkIDs  = 1000
	bulkPage    = 200 // jobs examined per filtered bulk call
	maxBulkErrs = 20
)

// checkJobFilter checks a filter's fields.
func checkJobFilter(f *JobFilter) *apiError {
	if f.Queue != "" {
		if err := job.ValidateID("queue", f.Queue, job.MaxQueueLen); err != nil {
			return normalizeError(err)
		}
	}
	if f.State != "" && !job.ValidState(job.State(f.State)) {
		return invalid("state", "unknown state "+strconv.Quote(f.State))
	}
	if len(f.Type) > job.MaxTypeLen {
		return invalid("type", "longer than "+strconv.Itoa(job.MaxTypeLen)+" bytes")
	}
	if len(f.Prefix) > job.MaxIDLen {
		return invalid("prefix", "longer than "+strconv.Itoa(job.MaxIDLen)+" bytes")
	}
	return nil
}

func (f *JobFilter) keep(info *shard.Info) bool {
	return (f.Type == "" || info.Type == f.Type) && strings.HasPrefix(info.ID, f.Prefix)
}

// searchJobs reads one page of the jobs matching f from cursor, and the progress.
func (s *Server) searchJobs(ctx context.Context, f *JobFilter, limit int, cursor string) ([]*shard.Info, string, *Progress, error) {
	page, err := s.store.List(ctx, shard.ListFilter{Queue: f.Queue, State: job.State(f.State), Limit: limit, Cursor: cursor})
	if err != nil {
		return nil, "", nil, err
	}
	out := page.Jobs[:0]
	for _, info := range page.Jobs {
		if f.keep(info) {
			out = append(out, info)
		}
	}
	done, total, err := s.store.ListProgress(ctx, page.Next)
	if err != nil {
		return nil, "", nil, err
	}
	return out, page.Next, &Progress{Done: done, Total: total}, nil
}

// bulkJobs serves POST /v1/jobs:bulk.
func (s *Server) bulkJobs(ctx *fasthttp.RequestCtx, _ string) {
	req, aerr := s.bulkRequest(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var op func(context.Context, string) (bool, error)
	switch req.Action {
	case "cancel", "pause", "resume":
		fn := map[string]func(*shard.Store, context.Context, string) (job.State, bool, error){
			"cancel": (*shard.Store).Cancel, "pause": (*shard.Store).Pause, "resume": (*shard.Store).Resume}[req.Action]
		op = func(c context.Context, id string) (bool, error) { _, ch, err := fn(s.store, c, id); return ch, err }
	case "trigger":
		op = func(c context.Context, id string) (bool, error) {
			_, err := s.store.Trigger(c, id)
			return err == nil, err
		}
	case "delete":
		op = func(c context.Context, id string) (bool, error) {
			err := s.store.Delete(c, id)
			return err == nil, err
		}
	default:
		writeError(ctx, invalid("action", "must be cancel, pause, resume, trigger or delete, got "+strconv.Quote(req.Action)))
		return
	}
	var reply BulkReply
	ids := req.IDs
	if req.Filter != nil {
		if aerr := checkJobFilter(req.Filter); aerr != nil {
			writeError(ctx, aerr)
			return
		}
		rc, cancel := s.rctx(ctx)
		infos, next, prog, err := s.searchJobs(rc, req.Filter, bulkPage, req.Cursor)
		cancel()
		if err != nil {
			s.storeError(ctx, "jobs", err)
			return
		}
		for _, info := range infos {
			ids = append(ids, info.ID)
		}
		reply.NextCursor, reply.Progress = next, prog
	} else {
		for _, id := range ids {
			if err := job.ValidateRef("ids", id, job.MaxIDLen); err != nil {
				writeError(ctx, normalizeError(err))
				return
			}
		}
	}
	for _, id := range ids {
		rc, cancel := s.rctx(ctx)
		changed, err := op(rc, id)
		cancel()
		s.bulkResult(ctx, &reply, jobWhat(id), id, changed, err)
	}
	writeJSON(ctx, fasthttp.StatusOK, &reply)
}

func (s *Server) bulkResult(ctx context.Context, reply *BulkReply, what, id string, changed bool, err error) {
	reply.Matched++
	switch {
	case err != nil:
		reply.Failed++
		if len(reply.Errors) < maxBulkErrs {
			reply.Errors = append(reply.Errors, BulkError{ID: id, Error: *s.storeAPIError(ctx, what, err).wire()})
		}
	case changed:
		reply.Changed++
	}
}

// bulkRequest decodes and checks the common part of a bulk body: ids or a filter.
func (s *Server) bulkRequest(ctx *fasthttp.RequestCtx) (*BulkRequest, *apiError) {
	if mt := mediaType(ctx); !isJSON(mt) {
		return nil, &apiError{status: 415, code: CodeUnsupported,
			msg: "Content-Type " + strconv.Quote(string(mt)) + " is not supported: send application/json"}
	}
	var req BulkRequest
	if aerr := decodeJSON(ctx.PostBody(), &req); aerr != nil {
		return nil, aerr
	}
	switch {
	case (len(req.IDs) > 0) == (req.Filter != nil):
		return nil, invalid("", "give either ids or filter")
	case len(req.IDs) > maxBulkIDs:
		return nil, invalid("ids", "at most "+strconv.Itoa(maxBulkIDs)+" ids per call, got "+strconv.Itoa(len(req.IDs)))
	case req.Cursor != "" && req.Filter == nil:
		return nil, invalid("cursor", "only with a filter")
	}
	return &req, nil
}

// bulkDead serves POST /v1/dead:bulk.
func (s *Server) bulkDead(ctx *fasthttp.RequestCtx, _ string) {
	req, aerr := s.bulkRequest(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var op func(*shard.Store, context.Context, string) error
	switch req.Action {
	case "requeue":
		op = (*shard.Store).RequeueDead
	case "delete":
		op = (*shard.Store).DeleteDead
	default:
		writeError(ctx, invalid("action", "must be requeue or delete, got "+strconv.Quote(req.Action)))
		return
	}
	var reply BulkReply
	runs := req.IDs
	if req.Filter != nil {
		if req.Filter.State != "" || req.Filter.Type != "" || req.Filter.Prefix != "" {
			writeError(ctx, invalid("filter", "dead runs filter by queue only"))
			return
		}
		if aerr := checkJobFilter(req.Filter); aerr != nil {
			writeError(ctx, aerr)
			return
		}
		rc, cancel := s.rctx(ctx)
		dead, next, err := s.store.Dead(rc, req.Filter.Queue, bulkPage, req.Cursor)
		cancel()
		if err != nil {
			s.storeError(ctx, "dead runs", err)
			return
		}
		for _, d := range dead {
			runs = append(runs, d.Member)
		}
		reply.NextCursor = next
	} else {
		for _, r := range runs {
			if aerr := validRun(r); aerr != nil {
				aerr.field = "ids"
				writeError(ctx, aerr)
				return
			}
		}
	}
	for _, r := range runs {
		rc, cancel := s.rctx(ctx)
		err := op(s.store, rc, r)
		cancel()
		s.bulkResult(ctx, &reply, "dead run "+strconv.Quote(r), r, err == nil, err)
	}
	writeJSON(ctx, fasthttp.StatusOK, &reply)
}
