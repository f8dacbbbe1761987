package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/shard"
)

// The commands of the API's operations endpoints: tock cluster, tock figures, tock jobs
// bulk and tock dead bulk.

// jobsBulkActions and deadBulkActions are the actions of POST /v1/jobs:bulk and
// /v1/dead:bulk.
var (
	jobsBulkActions = []string{"cancel", "pause", "resume", "trigger", "delete"}
	deadBulkActions = []string{"requeue", "delete"}
)

func init() {
	apiHelp["cluster"] = commandHelp{"tock cluster [flags]",
		"Print the cluster: the live dispatchers and the shards whose lease each holds; per shard its " +
			"owner, lease epoch and TTL and its scheduled, ready, in-flight and dead counts (a shard " +
			"nobody owns shows -); the workers seen in the last 5 minutes; the Redis nodes and their roles."}
	apiHelp["figures"] = commandHelp{"tock figures [--queue Q] [--minutes N] [flags]",
		"Print the per-minute figures of each queue (or of --queue): first the last 5 minutes summed " +
			"(fires per second, attempts ended, lateness p50 and p99), then each of the last --minutes " +
			"minutes, oldest first. Lateness is the upper bound of the histogram bucket the quantile falls " +
			"in; - where no run ended or no dispatcher sampled the minute."}
	apiHelp["jobs bulk"] = commandHelp{"tock jobs bulk ACTION (ID... | FILTER FLAGS | --all) [flags]",
		"Apply ACTION (" + strings.Join(jobsBulkActions, ", ") + ") to the jobs listed, or to every job " +
			"matching the filter flags (--all: every job), a bounded page per API call, following the " +
			"cursors to the end with the progress on stderr. Prints what was matched, changed and failed, " +
			"and the first failures; exits 1 when any failed."}
	apiHelp["dead bulk"] = commandHelp{"tock dead bulk requeue|delete (RUN... | --queue Q | --all) [flags]",
		"Requeue or delete the dead runs listed (RUN is <job id>:<due ms>, as tock dead ls prints it), " +
			"or every dead run of --queue (--all: of every queue), a bounded page per API call, following " +
			"the cursors with the progress on stderr. Prints what was matched, changed and failed; exits 1 " +
			"when any failed."}
}

func runCluster(ctx context.Context, c *cli, args []string) error {
	a := c.newAPICmd("cluster")
	defer a.close()
	if err := a.parse(args, 0, ""); err != nil {
		return err
	}
	v, err := a.client.Cluster(ctx)
	if err != nil {
		return err
	}
	if a.asJSON {
		return a.printJSON(v)
	}
	tw := a.table()
	fmt.Fprintln(tw, "DISPATCHER\tLEASE EXPIRES\tSHARDS")
	for _, d := range v.Dispatchers {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Name, a.timeText(d.Expires), shardRanges(d.Shards))
	}
	if len(v.Dispatchers) == 0 {
		fmt.Fprintln(tw, "-\t-\t-")
	}
	if err := a.section(tw); err != nil {
		return err
	}
	tw = a.table()
	fmt.Fprintln(tw, "SHARD\tOWNER\tEPOCH\tLEASE TTL\tSCHEDULED\tREADY\tIN FLIGHT\tDEAD")
	for _, s := range v.Shards {
		epoch, ttl := "-", "-"
		if s.Owner != "" {
			epoch = strconv.FormatInt(s.Epoch, 10)
			ttl = (time.Duration(s.LeaseTTLMs) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", s.Shard, orDash(s.Owner), epoch, ttl, s.Scheduled, s.Ready, s.InFlight, s.Dead)
	}
	if err := a.section(tw); err != nil {
		return err
	}
	tw = a.table()
	fmt.Fprintln(tw, "WORKER\tLAST SEEN")
	for _, w := range v.Workers {
		fmt.Fprintf(tw, "%s\t%s\n", w.ID, a.timeText(w.LastSeen))
	}
	if len(v.Workers) == 0 {
		fmt.Fprintln(tw, "-\t-")
	}
	if err := a.section(tw); err != nil {
		return err
	}
	tw = a.table()
	fmt.Fprintln(tw, "REDIS NODE\tROLE")
	for _, n := range v.Nodes {
		fmt.Fprintf(tw, "%s\t%s\n", n.Addr, orDash(n.Role))
	}
	return tw.Flush()
}

// section ends a table of several: it flushes tw and leaves a blank line.
func (a *apiCmd) section(tw *tabwriter.Writer) error {
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(a.out)
	return err
}

// shardRanges writes shard ids as ranges: "0-3,7".
func shardRanges(ids []int) string {
	if len(ids) == 0 {
		return "-"
	}
	ids = slices.Sorted(slices.Values(ids))
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ids[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(ids[j]))
		}
		i = j + 1
	}
	return b.String()
}

func runFigures(ctx context.Context, c *cli, args []string) error {
	a := c.newAPICmd("figures")
	defer a.close()
	var queue string
	var minutes int
	a.fs.StringVar(&queue, "queue", "", "only this queue")
	a.fs.IntVar(&minutes, "minutes", 0, "the last N minutes, 5 to "+strconv.Itoa(shard.MaxFigureMinutes)+" (default: the server's, 60)")
	if err := a.parse(args, 0, ""); err != nil {
		return err
	}
	set := false
	a.fs.Visit(func(f *flag.Flag) { set = set || f.Name == "minutes" })
	if set && (minutes < 5 || minutes > shard.MaxFigureMinutes) {
		return a.usageErrorf("--minutes %d: want 5 to %d", minutes, shard.MaxFigureMinutes)
	}
	l, err := a.client.Figures(ctx, queue, minutes)
	if err != nil {
		return err
	}
	if a.asJSON {
		return a.printJSON(l)
	}
	if len(l.Queues) == 0 {
		fmt.Fprintln(a.errOut, "no queues")
		return nil
	}
	tw := a.table()
	fmt.Fprintln(tw, "QUEUE\tFIRES/S (5M)\tENDED (5M)\tLATENESS P50\tLATENESS P99")
	for _, q := range l.Queues {
		s := q.Last5m
		fires := "-"
		if s.FiresPerSecond != nil {
			fires = strconv.FormatFloat(*s.FiresPerSecond, 'f', 2, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", q.Queue, fires, s.Ended, msText(s.LatenessP50Ms), msText(s.LatenessP99Ms))
	}
	if err := a.section(tw); err != nil {
		return err
	}
	tw = a.table()
	fmt.Fprintln(tw, "QUEUE\tMINUTE\tFIRED\tENDED\tLATENESS P50\tLATENESS P99")
	for _, q := range l.Queues {
		for _, m := range q.Minutes {
			fired := "-"
			if m.Fired != nil {
				fired = strconv.FormatInt(*m.Fired, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", q.Queue, m.Minute.In(a.location()).Format("2006-01-02 15:04"), fired, m.Ended,
				msText(m.LatenessP50Ms), msText(m.LatenessP99Ms))
		}
	}
	return tw.Flush()
}

// msText is a lateness quantile, the upper bound of its histogram bucket: "≤ 20ms".
func msText(ms *float64) string {
	if ms == nil {
		return "-"
	}
	return "≤ " + time.Duration(*ms*float64(time.Millisecond)).String()
}

// bulk runs tock jobs bulk (dead false) or tock dead bulk (dead true).
func (a *apiCmd) bulk(ctx context.Context, args []string, dead bool) error {
	var f ingest.JobFilter
	var all bool
	actions, what := jobsBulkActions, "jobs"
	if dead {
		actions, what = deadBulkActions, "dead runs"
	}
	a.fs.StringVar(&f.Queue, "queue", "", "the "+what+" of this queue")
	if !dead {
		a.fs.StringVar(&f.State, "state", "", "the jobs in this state (scheduled, ready, running, retrying, paused, completed, dead, cancelled)")
		a.fs.StringVar(&f.Type, "type", "", "the jobs of this type")
		a.fs.StringVar(&f.Prefix, "prefix", "", "the jobs whose id starts with this")
	}
	a.fs.BoolVar(&all, "all", false, "every one of the "+what+" (no filter)")
	if err := a.parse(args, -1, "an action ("+strings.Join(actions, ", ")+")"); err != nil {
		return err
	}
	action, ids := a.args[0], a.args[1:]
	if !slices.Contains(actions, action) {
		return a.usageErrorf("unknown action %q (want %s)", action, strings.Join(actions, ", "))
	}
	filtered := f != (ingest.JobFilter{})
	switch {
	case len(ids) > 0 && (filtered || all):
		return a.usageErrorf("give ids or a filter, not both")
	case len(ids) == 0 && !filtered && !all:
		if dead {
			return a.usageErrorf("give runs, --queue, or --all for every dead run")
		}
		return a.usageErrorf("give ids, a filter (--queue, --state, --type, --prefix), or --all for every job")
	case filtered && all:
		return a.usageErrorf("--all excludes a filter")
	}
	do := a.client.BulkJobs
	if dead {
		do = a.client.BulkDead
	}
	name := strings.TrimPrefix(a.fs.Name(), "tock ") + " " + action
	var sum ingest.BulkReply
	if len(ids) > 0 {
		// At most 1000 ids per call.
		for chunk := range slices.Chunk(ids, 1000) {
			r, err := do(ctx, ingest.BulkRequest{Action: action, IDs: chunk})
			if err != nil {
				_ = a.printBulk(sum) // what was done before the error
				return fmt.Errorf("%s: %w", name, err)
			}
			addBulk(&sum, r)
		}
	} else {
		var err error
		pages := 0
		sum, err = a.client.BulkAll(ctx, do, ingest.BulkRequest{Action: action, Filter: &f}, func(r ingest.BulkReply) {
			pages++
			progress := ""
			if r.Progress != nil {
				progress = fmt.Sprintf(", searched %d of %d", r.Progress.Done, r.Progress.Total)
			}
			fmt.Fprintf(a.errOut, "%s: page %d: %d matched, %d changed, %d failed%s\n", name, pages, r.Matched, r.Changed, r.Failed, progress)
		})
		if err != nil {
			_ = a.printBulk(sum) // what was done before the error
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := a.printBulk(sum); err != nil {
		return err
	}
	if sum.Failed > 0 {
		return fmt.Errorf("%s: %d of %d failed", name, sum.Failed, sum.Matched)
	}
	return nil
}

func addBulk(sum *ingest.BulkReply, r ingest.BulkReply) {
	sum.Matched += r.Matched
	sum.Changed += r.Changed
	sum.Failed += r.Failed
	sum.Errors = append(sum.Errors, r.Errors...)
}

// printBulk prints a bulk action's sums and its first failures.
func (a *apiCmd) printBulk(sum ingest.BulkReply) error {
	sum.NextCursor, sum.Progress = "", nil
	if a.asJSON {
		return a.printJSON(sum)
	}
	tw := a.table()
	fmt.Fprintln(tw, "MATCHED\tCHANGED\tFAILED")
	fmt.Fprintf(tw, "%d\t%d\t%d\n", sum.Matched, sum.Changed, sum.Failed)
	if len(sum.Errors) == 0 {
		return tw.Flush()
	}
	if err := a.section(tw); err != nil {
		return err
	}
	tw = a.table()
	fmt.Fprintln(tw, "ID\tERROR")
	for _, e := range sum.Errors {
		fmt.Fprintf(tw, "%s\t%s\n", e.ID, shorten(e.Error.Code+": "+e.Error.Message, 100))
	}
	return tw.Flush()
}
