package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tockhq/tock/ingest"
)

// tock queues prints the API's queue figures (GET /v1/queues). The API has no count of
// processed or failed runs and no lateness: workers count those, in the process they run
// in, as Prometheus metrics. So tock queues also reads the API's GET /metrics and shows
// the figures of the workers that run in the API's process (tock dev runs one); with
// tock server, whose workers are other processes, they stay "-".

func runQueues(ctx context.Context, c *cli, args []string) error {
	if len(args) > 0 && (args[0] == "pause" || args[0] == "resume") {
		sub := args[0]
		a := c.newAPICmd("queues " + sub)
		defer a.close()
		if err := a.parse(args[1:], -1, "a queue"); err != nil {
			return err
		}
		action := a.client.PauseQueue
		if sub == "resume" {
			action = a.client.ResumeQueue
		}
		return a.stateActions(ctx, "QUEUE", action)
	}
	a := c.newAPICmd("queues")
	defer a.close()
	var watch bool
	var interval time.Duration
	a.fs.BoolVar(&watch, "watch", false, "redraw every --interval until Ctrl-C; while the API cannot be reached, say so and keep trying")
	durationVar(a.fs, &interval, "interval", 2*time.Second, "redraw interval of --watch")
	if err := a.parse(args, 0, ""); err != nil {
		return err
	}
	if interval <= 0 {
		return a.usageErrorf("--interval must be positive")
	}
	if !watch {
		l, err := a.client.Queues(ctx)
		if err != nil {
			return err
		}
		if a.asJSON {
			return a.printJSON(l)
		}
		figs := a.workerFigures(ctx)
		return a.printQueues(l.Queues, figs, nil, true)
	}
	return a.watchQueues(ctx, interval)
}

// watchQueues redraws the queue figures every interval until ctx ends. A failure to
// reach the API (or a 5xx reply) is reported once and retried every interval; any other
// error reply ends it.
func (a *apiCmd) watchQueues(ctx context.Context, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev map[string]*workerFigures
	down := false
	notes := true // the note about missing worker figures, once
	for {
		l, err := a.client.Queues(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !retryable(err):
			return err
		case err != nil:
			now := a.clock().In(a.location()).Format("2006-01-02 15:04:05")
			if !down || a.tty {
				if a.tty {
					fmt.Fprintf(a.out, "\x1b[H\x1b[2J%s   every %s, Ctrl-C stops\n\n", now, interval)
				}
				fmt.Fprintf(a.errOut, "%s cannot reach the API at %s: %v; retrying every %s (Ctrl-C stops)\n", now, a.api, err, interval)
			}
			down = true
		default:
			if down {
				fmt.Fprintf(a.errOut, "%s the API answers again\n", a.clock().In(a.location()).Format("2006-01-02 15:04:05"))
				down = false
			}
			figs := a.workerFigures(ctx)
			if a.asJSON {
				// One compact document per line, for `| jq` and log files.
				b, err := json.Marshal(l)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.out, "%s\n", b)
			} else {
				now := a.clock().In(a.location()).Format("2006-01-02 15:04:05")
				if a.tty {
					// Clear the screen and draw from the top left.
					fmt.Fprintf(a.out, "\x1b[H\x1b[2J%s   every %s, Ctrl-C stops\n\n", now, interval)
				} else {
					fmt.Fprintf(a.out, "\n%s\n", now)
				}
				if err := a.printQueues(l.Queues, figs, prev, notes || a.tty); err != nil {
					return err
				}
				notes = false
			}
			if figs != nil {
				prev = figs
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// retryable reports whether --watch should try again after err: the API could not be
// reached, or answered 5xx (its Redis is down, say). Other replies will not change.
func retryable(err error) bool {
	var ae *ingest.APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500
	}
	return true
}

// printQueues prints the queue figures l and, from figs, those of the workers in the
// API's process; the lateness is over the time since prev when prev is set. note asks
// for the note that says why worker figures are missing, when they all are.
func (a *apiCmd) printQueues(qs []ingest.Queue, figs, prev map[string]*workerFigures, note bool) error {
	tw := a.table()
	fmt.Fprintln(tw, "QUEUE\tPAUSED\tSCHEDULED\tREADY\tIN FLIGHT\tDEAD\tFIRED\tFIRED/S\tPROCESSED\tFAILED\tLATENESS P99")
	have := false
	for _, q := range qs {
		paused := "-"
		if q.Paused {
			paused = "yes"
		}
		processed, failed, late := "-", "-", "-"
		if f := figs[q.Name]; f != nil {
			have = true
			processed, failed = strconv.FormatFloat(f.processed, 'f', 0, 64), strconv.FormatFloat(f.failed, 'f', 0, 64)
			if p99 := f.since(prev[q.Name]).quantile(0.99); p99 != "" {
				late = p99
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\t%s\t%s\n", q.Name, paused, q.Scheduled, q.Ready, q.InFlight,
			q.Dead, q.Fired, q.FireRate, processed, failed, late)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case len(qs) == 0:
		fmt.Fprintln(a.errOut, "no queues yet")
	case !have && note:
		fmt.Fprintln(a.errOut, "PROCESSED, FAILED and LATENESS come from the workers in the API's process (tock dev), "+
			"through its GET /metrics: no worker in the API's process has finished a run (workers of tock server "+
			"report them on their own metrics: tock_runs_finished_total, tock_fire_lateness_seconds)")
	}
	return nil
}

// lateText formats a lateness: 850µs, 12.5ms, 1.2s.
func lateText(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// workerFigures are one queue's figures from the workers of the API's process: attempts
// that succeeded and that failed (retried or dead), and the lateness histogram
// (due time to handler start).
type workerFigures struct {
	processed, failed float64
	buckets           []bucket // cumulative, by upper bound
}

// bucket is a cumulative histogram bucket: count observations were at most le seconds.
type bucket struct {
	le    float64
	count float64
}

// since returns the lateness histogram of f less that of prev: the observations made
// since prev was read. Without prev, or after a restart of the process, it is f's.
func (f *workerFigures) since(prev *workerFigures) *workerFigures {
	if prev == nil || len(prev.buckets) != len(f.buckets) {
		return f
	}
	d := &workerFigures{buckets: make([]bucket, len(f.buckets))}
	for i, b := range f.buckets {
		if prev.buckets[i].le != b.le || prev.buckets[i].count > b.count {
			return f
		}
		d.buckets[i] = bucket{b.le, b.count - prev.buckets[i].count}
	}
	return d
}

// quantile estimates the q-quantile of the histogram as Prometheus' histogram_quantile
// does: linearly within the bucket that holds it. It returns "" without observations,
// and ">" and the last finite bound for a quantile beyond it.
func (f *workerFigures) quantile(q float64) string {
	n := len(f.buckets)
	if n == 0 || f.buckets[n-1].count == 0 {
		return ""
	}
	rank := q * f.buckets[n-1].count
	prevLe, prevCount := 0.0, 0.0
	for _, b := range f.buckets {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				break
			}
			v := b.le
			if b.count > prevCount {
				v = prevLe + (b.le-prevLe)*(rank-prevCount)/(b.count-prevCount)
			}
			return lateText(time.Duration(v * float64(time.Second)))
		}
		prevLe, prevCount = b.le, b.count
	}
	return ">" + lateText(time.Duration(prevLe*float64(time.Second)))
}

// workerFigures reads the API's GET /metrics for the figures of the workers in its
// process, by queue. It returns nil when they cannot be read or there are none: the
// queue figures are shown without them.
func (a *apiCmd) workerFigures(ctx context.Context) map[string]*workerFigures {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(a.api, "/")+"/metrics", nil)
	if err != nil {
		return nil
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	req.Close = true // no idle connection stays behind (one read per redraw at most)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	figs, err := parseWorkerFigures(io.LimitReader(resp.Body, 64<<20))
	if err != nil || len(figs) == 0 {
		return nil
	}
	return figs
}

// metricLineRE matches a sample of the Prometheus text format: name, labels, value.
var (
	metricLineRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)`)
	labelRE      = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseWorkerFigures reads tock_runs_finished_total{queue,outcome} and
// tock_fire_lateness_seconds_bucket{queue,le} from the Prometheus text format, by queue.
func parseWorkerFigures(r io.Reader) (map[string]*workerFigures, error) {
	figs := map[string]*workerFigures{}
	get := func(q string) *workerFigures {
		if figs[q] == nil {
			figs[q] = &workerFigures{}
		}
		return figs[q]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "tock_runs_finished_total") && !strings.HasPrefix(line, "tock_fire_lateness_seconds_bucket") {
			continue
		}
		m := metricLineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		q := labels["queue"]
		if q == "" {
			continue
		}
		switch m[1] {
		case "tock_runs_finished_total":
			switch labels["outcome"] {
			case "succeeded":
				get(q).processed += v
			case "failed", "dead":
				get(q).failed += v
			default:
				get(q) // the queue has figures, if none of these
			}
		case "tock_fire_lateness_seconds_bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err != nil {
				continue
			}
			f := get(q)
			f.buckets = append(f.buckets, bucket{le, v})
		}
	}
	for _, f := range figs {
		sort.Slice(f.buckets, func(i, j int) bool { return f.buckets[i].le < f.buckets[j].le })
	}
	return figs, sc.Err()
}
