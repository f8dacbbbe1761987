package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tockhq/tock/ingest"
)

const workflowsUsage = `Usage:
  tock workflows create --file FILE [--idempotency-key K]   (a WorkflowRequest as JSON; - reads stdin)
  tock workflows get ID
  tock workflows ls [--state S] [--prefix P] [--limit N] [--cursor C] [--all]
  tock workflows cancel|retry ID...
  tock workflows pause|resume|trigger|delete ID...   (a scheduled workflow's definition)
  tock workflows result ID NODE   (a succeeded node's result, as its bytes)
API flags: --api URL (env TOCK_API, default ` + defaultAPI + `), --token T (env TOCK_TOKEN), --json
`

func init() {
	for k, v := range map[string]commandHelp{
		"workflows create": {"tock workflows create --file FILE [flags]",
			"Create a workflow through the API: a graph of jobs, each run when its rule over the jobs it " +
				"depends on is met (docs/workflows.md). FILE holds a WorkflowRequest as JSON; - reads stdin. " +
				"With a schedule, the workflow is a definition that starts an instance of the graph at every " +
				"occurrence. The id is the idempotency key: the same definition again prints exists, another " +
				"one fails with 409 conflict."},
		"workflows get": {"tock workflows get ID [flags]",
			"Print a workflow and every node: state, rule, dependencies, attempts, when it was released and " +
				"ended, the size of its result. For a scheduled workflow's definition: its schedule, next " +
				"occurrence and graph."},
		"workflows ls": {"tock workflows ls [flags]",
			"List workflows, a page at a time (--all follows the cursors), with their state and how many " +
				"nodes are left; --state scheduled lists the scheduled definitions. --prefix keeps the " +
				"workflows whose id starts with it: --prefix nightly@ lists the instances of the scheduled " +
				"workflow nightly, running, held and ended."},
		"workflows cancel": {"tock workflows cancel ID... [flags]",
			"Cancel workflows: their nodes that did not end are cancelled, running handlers told. On a " +
				"scheduled workflow's definition: no instance starts any more."},
		"workflows retry": {"tock workflows retry ID... [flags]",
			"Run failed or cancelled workflows again from the nodes that did not succeed."},
		"workflows pause":   {"tock workflows pause ID... [flags]", "Pause scheduled workflows: no instance starts until they are resumed."},
		"workflows resume":  {"tock workflows resume ID... [flags]", "Resume paused scheduled workflows."},
		"workflows trigger": {"tock workflows trigger ID... [flags]", "Start an instance of scheduled workflows now, outside their schedule, and print it."},
		"workflows delete": {"tock workflows delete ID... [flags]",
			"Delete scheduled workflows' definitions now; their instances are left to end and expire."},
		"workflows result": {"tock workflows result ID NODE [flags]",
			"Print the result a succeeded node's handler returned, as its bytes."},
	} {
		apiHelp[k] = v
	}
	aliases["workflows"] = map[string]string{"list": "ls", "rm": "delete"}
}

func runWorkflows(ctx context.Context, c *cli, args []string) error {
	sub, args, err := subcommand(c, "workflows", workflowsUsage, args,
		"create", "get", "ls", "cancel", "retry", "pause", "resume", "trigger", "delete", "result")
	if err != nil {
		return err
	}
	a := c.newAPICmd("workflows " + sub)
	defer a.close()
	switch sub {
	case "create":
		return a.workflowsCreate(ctx, args)
	case "get":
		if err := a.parse(args, 1, "a workflow id"); err != nil {
			return err
		}
		w, err := a.client.Workflow(ctx, a.args[0])
		if err != nil {
			return err
		}
		if a.asJSON {
			return a.printJSON(w)
		}
		return a.printWorkflow(w)
	case "ls":
		return a.workflowsList(ctx, args)
	case "cancel", "retry", "pause", "resume", "delete":
		if err := a.parse(args, -1, "a workflow id"); err != nil {
			return err
		}
		action := map[string]func(context.Context, string) (ingest.StateReply, error){
			"cancel": a.client.CancelWorkflow, "retry": a.client.RetryWorkflow, "pause": a.client.PauseWorkflow,
			"resume": a.client.ResumeWorkflow, "delete": a.client.DeleteWorkflow,
		}[sub]
		return a.stateActions(ctx, "ID", action)
	case "trigger":
		if err := a.parse(args, -1, "a workflow id"); err != nil {
			return err
		}
		var replies []ingest.WorkflowTriggerReply
		var err error
		for _, id := range a.args {
			var r ingest.WorkflowTriggerReply
			if r, err = a.client.TriggerWorkflow(ctx, id); err != nil {
				err = fmt.Errorf("workflows trigger %s: %w", id, err)
				break
			}
			replies = append(replies, r)
		}
		if a.asJSON {
			if len(a.args) == 1 && len(replies) == 1 {
				return a.printJSON(replies[0])
			}
			if replies == nil {
				replies = []ingest.WorkflowTriggerReply{}
			}
			return errors.Join(a.printJSON(replies), err)
		}
		if len(replies) > 0 {
			tw := a.table()
			fmt.Fprintln(tw, "ID\tRUN\tINSTANCE")
			for _, r := range replies {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, r.Run, r.Instance)
			}
			if ferr := tw.Flush(); ferr != nil {
				return errors.Join(ferr, err)
			}
		}
		return err
	case "result":
		if err := a.parse(args, 2, "a workflow id and a node id"); err != nil {
			return err
		}
		b, err := a.client.NodeResult(ctx, a.args[0], a.args[1])
		if err != nil {
			return err
		}
		if _, err := a.out.Write(b); err != nil {
			return err
		}
		if len(b) > 0 && b[len(b)-1] != '\n' && a.tty {
			fmt.Fprintln(a.out)
		}
		return nil
	}
	return nil
}

func (a *apiCmd) workflowsCreate(ctx context.Context, args []string) error {
	var file, key string
	a.fs.StringVar(&file, "file", "", "read the workflow (a JSON WorkflowRequest) from this file; - is stdin (required)")
	a.fs.StringVar(&key, "idempotency-key", "", "sent as the Idempotency-Key header")
	if err := a.parse(args, 0, ""); err != nil {
		return err
	}
	if file == "" {
		return a.usageErrorf("--file is required (a JSON WorkflowRequest; - reads stdin)")
	}
	b, err := readFileOrStdin(file, a.in)
	if err != nil {
		return fmt.Errorf("workflows create: --file: %w", err)
	}
	var req ingest.WorkflowRequest
	if err := ingest.DecodeRequest(b, &req); err != nil {
		return fmt.Errorf("workflows create: --file %s: %w", file, err)
	}
	w, created, err := a.client.CreateWorkflow(ctx, req, key)
	if err != nil {
		return err
	}
	if a.asJSON {
		return a.printJSON(w)
	}
	tw := a.table()
	fmt.Fprintln(tw, "ID\tSTATE\tNODES\tSHARD\tRESULT")
	result := "created"
	if !created {
		result = "exists"
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", w.ID, w.State, w.Nodes, w.Shard, result)
	return tw.Flush()
}

func (a *apiCmd) workflowsList(ctx context.Context, args []string) error {
	var state, prefix, cursor string
	var limit int
	var all bool
	a.fs.StringVar(&state, "state", "", "only this state (running, succeeded, failed, cancelled; scheduled: the definitions)")
	a.fs.StringVar(&prefix, "prefix", "", "only workflows whose id starts with this (DEF@: the instances of scheduled workflow DEF)")
	a.fs.IntVar(&limit, "limit", 0, "workflows per page (default: the server's, 100)")
	a.fs.StringVar(&cursor, "cursor", "", "continue a listing from its next_cursor")
	a.fs.BoolVar(&all, "all", false, "follow the cursors to the end of the listing")
	if err := a.parse(args, 0, ""); err != nil {
		return err
	}
	var ws []ingest.WorkflowSummary
	for {
		l, err := a.client.ListWorkflows(ctx, ingest.WorkflowFilter{State: state, Prefix: prefix}, limit, cursor)
		if err != nil {
			return err
		}
		ws = append(ws, l.Workflows...)
		cursor = l.NextCursor
		if !all || cursor == "" {
			break
		}
	}
	if a.asJSON {
		if ws == nil {
			ws = []ingest.WorkflowSummary{}
		}
		return a.printJSON(ingest.WorkflowList{Workflows: ws, NextCursor: cursor})
	}
	tw := a.table()
	if state == "scheduled" {
		fmt.Fprintln(tw, "ID\tSTATE\tSCHEDULE\tNEXT RUN\tNODES")
		for _, w := range ws {
			st := w.State
			if w.JobState != "" && w.JobState != w.State {
				st += " (" + w.JobState + ")"
			}
			sch := "-"
			if w.Schedule != nil {
				sch = scheduleText(*w.Schedule)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", w.ID, st, sch, a.timeOrDash(w.NextRunAt), w.Nodes)
		}
	} else {
		fmt.Fprintln(tw, "ID\tSTATE\tNODES\tLEFT\tCREATED\tENDED")
		for _, w := range ws {
			st := w.State
			if w.Held {
				st += " (held)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", w.ID, st, w.Nodes, w.Left, a.timeOrDash(w.CreatedAt), a.timeOrDash(w.EndedAt))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if cursor != "" {
		fmt.Fprintf(a.errOut, "more workflows follow: --cursor %s (or --all)\n", cursor)
	} else if len(ws) == 0 {
		fmt.Fprintln(a.errOut, "no workflows")
	}
	return nil
}

// printWorkflow prints a workflow as rows, then its nodes as a table; a scheduled
// workflow's definition with its schedule and graph.
func (a *apiCmd) printWorkflow(w ingest.Workflow) error {
	tw := a.table()
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("id", w.ID)
	st := w.State
	if w.Held {
		st += " (held: waits for its definition's running instance)"
	}
	row("state", st)
	if w.Definition != nil || w.Schedule != nil {
		row("definition", orDash(w.JobState))
		if w.Schedule != nil {
			row("schedule", scheduleText(*w.Schedule))
		}
		row("next run", a.timeOrDash(w.NextRunAt))
		misfire := orDash(w.Misfire)
		if w.MisfireAfter != "" {
			misfire += " after " + w.MisfireAfter
		}
		row("overlap", orDash(w.Overlap))
		row("misfire", misfire)
	}
	row("shard", strconv.Itoa(w.Shard))
	row("created", a.timeOrDash(w.CreatedAt))
	if w.EndedAt != nil {
		row("ended", a.timeOrDash(w.EndedAt))
	}
	if w.ExpiresAt != nil {
		row("expires", a.timeOrDash(w.ExpiresAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.out)
	tw = a.table()
	if w.Definition != nil {
		fmt.Fprintln(tw, "NODE\tTYPE\tQUEUE\tRULE\tDEPENDS ON")
		for _, n := range w.Definition.Jobs {
			typ := n.Type
			if n.Target != nil {
				typ = "@push " + n.Target.URL
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.ID, orDash(typ), orDash(n.Queue), orDash(n.Rule), orDash(strings.Join(n.DependsOn, ",")))
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "NODE\tSTATE\tRULE\tDEPENDS ON\tATTEMPTS\tRELEASED\tENDED\tRESULT")
	for _, n := range w.Nodes {
		result := "-"
		if n.ResultSize > 0 {
			result = strconv.Itoa(n.ResultSize) + " B"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", n.ID, n.State, n.Rule, orDash(strings.Join(n.DependsOn, ",")),
			n.Attempts, a.timeOrDash(n.ReleasedAt), a.timeOrDash(n.EndedAt), result)
	}
	return tw.Flush()
}
