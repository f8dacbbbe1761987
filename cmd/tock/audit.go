package main

import (
	"context"
	"fmt"

	"github.com/tockhq/tock/ingest"
)

func init() {
	apiHelp["audit"] = commandHelp{"tock audit [--limit N] [--cursor C] [--all] [flags]",
		"Print the audit log, newest first: every management action (update, cancel, pause, resume, " +
			"trigger, delete, dead-letter requeue and delete, queue pause and resume, bulk actions, " +
			"dashboard logins and logouts) with when, who (token:<hash prefix of the token>, or " +
			"anonymous), via (api or ui), the action, its target and result, and the client's address. " +
			"Needs a write token."}
}

func runAudit(ctx context.Context, c *cli, args []string) error {
	a := c.newAPICmd("audit")
	defer a.close()
	var cursor string
	var limit int
	var all bool
	a.fs.IntVar(&limit, "limit", 0, "entries per page (default: the server's, 100)")
	a.fs.StringVar(&cursor, "cursor", "", "continue from a page's next_cursor (older entries)")
	a.fs.BoolVar(&all, "all", false, "follow the cursors to the oldest entry kept")
	if err := a.parse(args, 0, ""); err != nil {
		return err
	}
	if limit < 0 {
		return a.usageErrorf("--limit %d: want 1 or more", limit)
	}
	var es []ingest.AuditEntry
	for {
		p, err := a.client.Audit(ctx, limit, cursor)
		if err != nil {
			return err
		}
		es = append(es, p.Entries...)
		cursor = p.NextCursor
		if !all || cursor == "" {
			break
		}
	}
	if a.asJSON {
		if es == nil {
			es = []ingest.AuditEntry{}
		}
		return a.printJSON(ingest.AuditPage{Entries: es, NextCursor: cursor})
	}
	tw := a.table()
	fmt.Fprintln(tw, "TIME\tWHO\tVIA\tACTION\tTARGET\tRESULT\tFROM")
	for _, e := range es {
		target := e.Target
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.timeText(e.Time), e.Who, e.Via, e.Action, target, e.Result, e.Remote)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if cursor != "" {
		fmt.Fprintf(a.errOut, "older entries follow: --cursor %s (or --all)\n", cursor)
	} else if len(es) == 0 {
		fmt.Fprintln(a.errOut, "no entries")
	}
	return nil
}
