package ui

import (
	"context"
	"encoding/json"
	"hash/maphash"
	"net/url"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
)

// pageDef is a page: how to load its data from the API, and its live fragments.
type pageDef struct {
	name, title string
	live        []string // fragments the event stream refreshes
	load        func(u *UI, rc context.Context, c *ingest.Client, q url.Values, id string) (any, error)
	// clock is set for a page whose live fragments show how long ago something was: it
	// changes every second, whatever the API says.
	clock bool
}

var defs = map[string]*pageDef{
	"overview":  {name: "overview", title: "Overview", live: []string{"queues", "figures"}, load: (*UI).loadOverview},
	"jobs":      {name: "jobs", title: "Jobs", load: (*UI).loadJobs},
	"job":       {name: "job", title: "Job", live: []string{"job", "runs"}, load: (*UI).loadJob},
	"dead":      {name: "dead", title: "Dead letters", live: []string{"dead"}, load: (*UI).loadDead},
	"schedules": {name: "schedules", title: "Schedules", live: []string{"schedules"}, load: (*UI).loadSchedules},
	"cluster":   {name: "cluster", title: "Cluster", live: []string{"cluster"}, load: (*UI).loadCluster, clock: true},
	"audit":     {name: "audit", title: "Audit log", live: []string{"audit"}, load: (*UI).loadAudit},
	"workflows": {name: "workflows", title: "Workflows", live: []string{"workflows"}, load: (*UI).loadWorkflows},
	"workflow":  {name: "workflow", title: "Workflow", live: []string{"workflow", "graph", "nodes"}, load: (*UI).loadWorkflow},
}

// show loads and renders a page.
func (u *UI) show(ctx *fasthttp.RequestCtx, v *viewer, name, id string) {
	d := defs[name]
	q, _ := url.ParseQuery(string(ctx.URI().QueryString()))
	rc, cancel := u.rctx(ctx)
	data, version, err := u.load(rc, v, name, id, q)
	cancel()
	if err != nil {
		u.apiFail(ctx, err)
		return
	}
	p := u.pageOf(v, name, d.title, data)
	if len(d.live) > 0 && liveOK(name, q) {
		p.Live = Prefix + "/events?page=" + url.QueryEscape(string(ctx.URI().RequestURI()))
		if v.cookie != "" {
			// Not without tokens: there is no session, and each process has its own CSRF
			// token; a page of one process would be reloaded for ever behind a balancer.
			p.Live += "&as=" + v.tag()
		}
		p.Version = version
	}
	u.renderPage(ctx, name, p)
}

// load loads page name's data and its version: a hash of every API reply read for it
// (and of the second, for a page whose live fragments say how long ago something was).
// The version changes whenever what the page shows may have changed, so a live update
// compares versions and renders nothing while they are equal.
func (u *UI) load(ctx context.Context, v *viewer, name, id string, q url.Values) (data any, version string, err error) {
	d := defs[name]
	var h maphash.Hash
	h.SetSeed(u.seed)
	data, err = d.load(u, withDigest(ctx, &h), u.client(v), q, id)
	if err != nil {
		return nil, "", err
	}
	if d.clock {
		_, _ = h.WriteString(strconv.FormatInt(time.Now().Unix(), 10))
	}
	return data, strconv.FormatUint(h.Sum64(), 36), nil
}

// liveOK: pages past their first page are not refreshed (the rows would change under
// the reader's cursor).
func liveOK(name string, q url.Values) bool { return q.Get("cursor") == "" }

func (u *UI) renderPage(ctx *fasthttp.RequestCtx, name string, p *page) {
	if name == "job" {
		if j, ok := p.Data.(*jobData); ok {
			p.Title = "Job " + j.Job.ID
		}
	}
	if w, ok := p.Data.(*workflowData); ok {
		p.Title = "Workflow " + w.W.ID
	}
	u.renderP(ctx, name, p)
}

func (u *UI) overview(ctx *fasthttp.RequestCtx, v *viewer)  { u.show(ctx, v, "overview", "") }
func (u *UI) jobs(ctx *fasthttp.RequestCtx, v *viewer)      { u.show(ctx, v, "jobs", "") }
func (u *UI) dead(ctx *fasthttp.RequestCtx, v *viewer)      { u.show(ctx, v, "dead", "") }
func (u *UI) schedules(ctx *fasthttp.RequestCtx, v *viewer) { u.show(ctx, v, "schedules", "") }
func (u *UI) cluster(ctx *fasthttp.RequestCtx, v *viewer)   { u.show(ctx, v, "cluster", "") }
func (u *UI) audit(ctx *fasthttp.RequestCtx, v *viewer)     { u.show(ctx, v, "audit", "") }
func (u *UI) jobDetail(ctx *fasthttp.RequestCtx, v *viewer, id string) {
	u.show(ctx, v, "job", id)
}

// Overview.

type queueRow struct {
	ingest.Queue
	Last5m ingest.FigureSummary
}

type overviewData struct {
	Queues []queueRow
	// Figures is the chart data (JSON, read by app.js): per queue and minute, fires per
	// second and lateness p50/p99.
	Figures string
}

type chartSeries struct {
	Queue string     `json:"queue"`
	Fires []*float64 `json:"fires"` // per second, over each minute
	P50   []*float64 `json:"p50"`
	P99   []*float64 `json:"p99"`
}

type chartData struct {
	Minutes []int64       `json:"minutes"` // unix seconds
	Series  []chartSeries `json:"series"`
}

func (u *UI) loadOverview(rc context.Context, c *ingest.Client, _ url.Values, _ string) (any, error) {
	qs, err := c.Queues(rc)
	if err != nil {
		return nil, err
	}
	figs, err := c.Figures(rc, "", 60)
	if err != nil {
		return nil, err
	}
	byQueue := map[string]ingest.QueueFigures{}
	for _, f := range figs.Queues {
		byQueue[f.Queue] = f
	}
	d := &overviewData{}
	var cd chartData
	for _, q := range qs.Queues {
		f := byQueue[q.Name]
		d.Queues = append(d.Queues, queueRow{Queue: q, Last5m: f.Last5m})
		if len(f.Minutes) == 0 {
			continue
		}
		s := chartSeries{Queue: q.Name}
		fill := cd.Minutes == nil
		for _, m := range f.Minutes {
			if fill {
				cd.Minutes = append(cd.Minutes, m.Minute.Unix())
			}
			var fires *float64
			if m.Fired != nil {
				r := float64(*m.Fired) / 60
				fires = &r
			}
			s.Fires, s.P50, s.P99 = append(s.Fires, fires), append(s.P50, m.LatenessP50Ms), append(s.P99, m.LatenessP99Ms)
		}
		cd.Series = append(cd.Series, s)
	}
	b, err := json.Marshal(cd)
	if err != nil {
		return nil, err
	}
	d.Figures = string(b)
	return d, nil
}

// Jobs.

type jobsData struct {
	Q, Queue, State, Type string
	Exact                 *ingest.Job
	Jobs                  []ingest.Job
	Next                  string
	Progress              *ingest.Progress
	States                []job.State
	// Filter is the search as a bulk filter (JSON, for app.js).
	Filter string
}

// jobsPage is how many jobs a search page asks for.
const jobsPage = 50

var allStates = []job.State{job.StateWaiting, job.StateScheduled, job.StateReady, job.StateRunning, job.StateRetrying,
	job.StatePaused, job.StateCompleted, job.StateDead, job.StateCancelled}

func (u *UI) loadJobs(rc context.Context, c *ingest.Client, q url.Values, _ string) (any, error) {
	d := &jobsData{Q: q.Get("q"), Queue: q.Get("queue"), State: q.Get("state"), Type: q.Get("type"), States: allStates}
	if d.Q != "" && job.ValidateRef("id", d.Q, job.MaxIDLen) == nil && q.Get("cursor") == "" {
		// An exact id is one read, whatever the namespace holds.
		if j, err := c.GetJob(rc, d.Q); err == nil {
			d.Exact = &j
		} else if !ingest.IsCode(err, ingest.CodeNotFound) {
			return nil, err
		}
	}
	f := ingest.JobFilter{Queue: d.Queue, State: d.State, Type: d.Type, Prefix: d.Q}
	l, err := c.SearchJobs(rc, f, jobsPage, q.Get("cursor"))
	if err != nil {
		return nil, err
	}
	d.Jobs, d.Next, d.Progress = l.Jobs, l.NextCursor, l.Progress
	fb, _ := json.Marshal(f)
	d.Filter = string(fb)
	return d, nil
}

// NextURL is the URL of the next page of the search.
func (d *jobsData) NextURL() string {
	v := url.Values{"cursor": {d.Next}}
	for k, s := range map[string]string{"q": d.Q, "queue": d.Queue, "state": d.State, "type": d.Type} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return Prefix + "/jobs?" + v.Encode()
}

// Job detail.

type jobData struct {
	Job        ingest.Job
	Payload    string
	Binary     bool
	Runs       []ingest.Run
	Preview    *ingest.SchedulePreview
	PreviewErr string
}

// The actions a job's page offers are those that do something in its state (the API
// answers the others with "nothing to do", or refuses them): pause a job that may still
// start runs, resume a paused one, trigger one with an occurrence to fire (a recurring
// job, or a one-time job whose run is not under way yet), cancel one that has not ended,
// and delete any job. A workflow's node's job may only be cancelled: its workflow
// decides when it runs.

// node reports whether the job is a workflow's node's.
func (d *jobData) node() bool { return workflowOf(d.Job.ID) != nil }

// ended reports whether the job is in a final state: completed, dead or cancelled.
func (d *jobData) ended() bool { return job.State(d.Job.State).Ended() }

// CanPause reports whether Pause does something: the job may start runs.
func (d *jobData) CanPause() bool {
	return !d.node() && !d.ended() && d.Job.State != string(job.StatePaused)
}

// CanResume reports whether the job is paused.
func (d *jobData) CanResume() bool { return !d.node() && d.Job.State == string(job.StatePaused) }

// CanTrigger reports whether Trigger fires a run: a recurring job gets an extra one, a
// one-time job's pending run fires now; a paused or ended job, or a one-time job whose
// run is under way (ready, running, retrying), has none to fire.
func (d *jobData) CanTrigger() bool {
	return d.CanPause() && (d.Job.Schedule.Cron != "" || d.Job.NextRunAt != nil)
}

// CanCancel reports whether the job has not ended: cancelling an ended job (its run
// completed, dead or cancelled) changes nothing.
func (d *jobData) CanCancel() bool { return !d.ended() }

// CanDelete reports whether the job may be deleted: any job but a workflow's node's.
func (d *jobData) CanDelete() bool { return !d.node() }

func (u *UI) loadJob(rc context.Context, c *ingest.Client, _ url.Values, id string) (any, error) {
	j, err := c.GetJob(rc, id)
	if err != nil {
		return nil, err
	}
	d := &jobData{Job: j}
	var raw []byte
	if j.PayloadBase64 != "" {
		raw, _ = decodeB64(j.PayloadBase64)
	}
	d.Payload, d.Binary = prettyPayload(j.Payload, raw)
	runs, err := c.Runs(rc, id)
	if err != nil {
		return nil, err
	}
	d.Runs = runs.Runs
	if j.Schedule.Cron != "" {
		p, err := c.PreviewSchedule(rc, j.Schedule.Cron, j.Schedule.Timezone, 10, u.cfg.NowFunc())
		if err != nil {
			d.PreviewErr = err.Error()
		} else {
			if loc, err := time.LoadLocation(p.Timezone); err == nil {
				for i := range p.Fires {
					p.Fires[i].At = p.Fires[i].At.In(loc)
				}
			}
			d.Preview = &p
		}
	}
	return d, nil
}

// Dead letters.

type deadData struct {
	Queue  string
	Dead   []ingest.DeadRun
	Next   string
	Filter string
}

func (u *UI) loadDead(rc context.Context, c *ingest.Client, q url.Values, _ string) (any, error) {
	d := &deadData{Queue: q.Get("queue")}
	l, err := c.ListDead(rc, d.Queue, 100, q.Get("cursor"))
	if err != nil {
		return nil, err
	}
	d.Dead, d.Next = l.Dead, l.NextCursor
	fb, _ := json.Marshal(ingest.JobFilter{Queue: d.Queue})
	d.Filter = string(fb)
	return d, nil
}

// NextURL is the URL of the next page.
func (d *deadData) NextURL() string {
	v := url.Values{"cursor": {d.Next}}
	if d.Queue != "" {
		v.Set("queue", d.Queue)
	}
	return Prefix + "/dead?" + v.Encode()
}

// Schedules.

type scheduleRow struct {
	Job         ingest.Job
	LastFire    *time.Time
	LastOutcome string
}

type schedulesData struct {
	Rows     []scheduleRow
	Next     string
	Progress *ingest.Progress
}

// schedulePages bounds the listing calls of one schedules page.
const schedulePages = 4

func (u *UI) loadSchedules(rc context.Context, c *ingest.Client, q url.Values, _ string) (any, error) {
	d := &schedulesData{}
	cursor := q.Get("cursor")
	for i := 0; i < schedulePages && len(d.Rows) < 100; i++ {
		l, err := c.SearchJobs(rc, ingest.JobFilter{}, 1000, cursor)
		if err != nil {
			return nil, err
		}
		for _, j := range l.Jobs {
			if j.Schedule.Cron == "" {
				continue
			}
			row := scheduleRow{Job: j}
			if runs, err := c.Runs(rc, j.ID); err == nil && len(runs.Runs) > 0 {
				r := runs.Runs[0]
				row.LastFire, row.LastOutcome = &r.Due, r.Outcome
			}
			d.Rows = append(d.Rows, row)
		}
		cursor, d.Progress = l.NextCursor, l.Progress
		if cursor == "" {
			break
		}
	}
	d.Next = cursor
	return d, nil
}

// NextURL is the URL of the next page.
func (d *schedulesData) NextURL() string {
	return Prefix + "/schedules?" + url.Values{"cursor": {d.Next}}.Encode()
}

// Cluster.

type shardRow struct {
	ingest.ClusterShard
	Hot bool // more than twice the mean load
}

type clusterData struct {
	ingest.Cluster
	Rows []shardRow
	Mean float64
}

func (u *UI) loadCluster(rc context.Context, c *ingest.Client, _ url.Values, _ string) (any, error) {
	v, err := c.Cluster(rc)
	if err != nil {
		return nil, err
	}
	d := &clusterData{Cluster: v}
	var total int64
	for _, s := range v.Shards {
		total += s.Scheduled + s.Ready + s.InFlight
	}
	if len(v.Shards) > 0 {
		d.Mean = float64(total) / float64(len(v.Shards))
	}
	for _, s := range v.Shards {
		load := float64(s.Scheduled + s.Ready + s.InFlight)
		d.Rows = append(d.Rows, shardRow{ClusterShard: s, Hot: load >= 10 && load > 2*d.Mean})
	}
	return d, nil
}

// Audit log.

type auditData struct {
	Entries []ingest.AuditEntry
	Next    string
}

func (u *UI) loadAudit(rc context.Context, c *ingest.Client, q url.Values, _ string) (any, error) {
	p, err := c.Audit(rc, 100, q.Get("cursor"))
	if err != nil {
		return nil, err
	}
	return &auditData{Entries: p.Entries, Next: p.NextCursor}, nil
}

// NextURL is the URL of the next (older) page.
func (d *auditData) NextURL() string {
	return Prefix + "/audit?" + url.Values{"cursor": {d.Next}}.Encode()
}
