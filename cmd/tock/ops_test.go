package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// tock cluster prints the dispatchers with their shards, each shard's lease and counts,
// the workers and the Redis nodes; --json is the API's reply.
func TestCluster(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	_, err := b.store.Heartbeat(ctx, "disp-x", 10*time.Second, false)
	require.NoError(t, err)
	b.store.AcquireLeases(ctx, "disp-x", []shard.ID{0, 1, 3}, 10*time.Second)
	_, err = b.store.Create(ctx, []*job.Job{{ID: "r1", Type: "t", Schedule: job.Schedule{Now: true}},
		{ID: "s1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	require.NoError(t, b.store.WorkerSeen(ctx, "w-9", time.Now()))

	out := b.ok(t, "cluster")
	require.Regexp(t, `(?m)^DISPATCHER\s+LEASE EXPIRES\s+SHARDS$`, out)
	require.Regexp(t, `(?m)^disp-x\s+\S+ \S+\s+0-1,3$`, out)
	require.Regexp(t, `(?m)^SHARD\s+OWNER\s+EPOCH\s+LEASE TTL\s+SCHEDULED\s+READY\s+IN FLIGHT\s+DEAD$`, out)
	require.Regexp(t, `(?m)^0\s+disp-x\s+\d+\s+\S+s\s+\d+\s+\d+\s+0\s+0$`, out)
	require.Regexp(t, `(?m)^2\s+-\s+-\s+-\s+\d+\s+\d+\s+0\s+0$`, out, "a shard nobody owns")
	require.Regexp(t, `(?m)^WORKER\s+LAST SEEN$`, out)
	require.Regexp(t, `(?m)^w-9\s+\S+ \S+$`, out)
	require.Regexp(t, `(?m)^REDIS NODE\s+ROLE$`, out)
	require.Regexp(t, `(?m)^127\.0\.0\.1:\d+\s+\S+$`, out)

	v := decodeJSON[ingest.Cluster](t, b.ok(t, "cluster", "--json"))
	require.Len(t, v.Shards, 4)
	require.Equal(t, []int{0, 1, 3}, v.Dispatchers[0].Shards)
	var ready, scheduled int64
	for _, s := range v.Shards {
		ready, scheduled = ready+s.Ready, scheduled+s.Scheduled
	}
	require.Equal(t, int64(1), ready)
	require.Equal(t, int64(1), scheduled)

	r := b.run(t, "", "cluster", "extra")
	require.ErrorContains(t, r.err, `unexpected argument "extra"`)
}

func TestShardRanges(t *testing.T) {
	t.Parallel()
	require.Equal(t, "-", shardRanges(nil))
	require.Equal(t, "0-3,7,9-10", shardRanges([]int{9, 0, 1, 2, 3, 7, 10}))
}

// tock figures prints each queue's last 5 minutes and then every minute; --queue and
// --minutes are passed on, and a --minutes out of range is a usage error.
func TestFigures(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	_, err := b.store.Create(ctx, []*job.Job{{ID: "a", Queue: "q1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
		{ID: "b", Queue: "q2", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	now := time.Now()
	var d shard.FigureDelta
	d.Add(7 * time.Millisecond)
	require.NoError(t, b.store.AddFigures(ctx, map[shard.FigureKey]*shard.FigureDelta{
		{Queue: "q1", Minute: shard.Minute(now)}: &d, {Queue: "q2", Minute: shard.Minute(now)}: &d}))

	out := b.ok(t, "figures", "--queue", "q1", "--minutes", "5")
	require.Regexp(t, `(?m)^QUEUE\s+FIRES/S \(5M\)\s+ENDED \(5M\)\s+LATENESS P50\s+LATENESS P99$`, out)
	require.Regexp(t, `(?m)^q1\s+(-|\d+\.\d\d)\s+1\s+≤ 10ms\s+≤ 10ms$`, out)
	require.Regexp(t, `(?m)^QUEUE\s+MINUTE\s+FIRED\s+ENDED\s+LATENESS P50\s+LATENESS P99$`, out)
	require.Regexp(t, `(?m)^q1\s+\d{4}-\d\d-\d\d \d\d:\d\d\s+(-|\d+)\s+1\s+≤ 10ms\s+≤ 10ms$`, out)
	require.Regexp(t, `(?m)^q1\s+\d{4}-\d\d-\d\d \d\d:\d\d\s+-\s+0\s+-\s+-$`, out)
	require.NotContains(t, out, "q2")

	l := decodeJSON[ingest.FigureList](t, b.ok(t, "figures", "--minutes", "7", "--json"))
	require.Len(t, l.Queues, 2)
	require.Len(t, l.Queues[0].Minutes, 7)

	for _, m := range []string{"4", "121"} {
		r := b.run(t, "", "figures", "--minutes", m)
		require.ErrorContains(t, r.err, "--minutes "+m+": want 5 to 120")
		var ue *usageError
		require.ErrorAs(t, r.err, &ue)
	}
}

// tock jobs bulk applies an action to listed ids, or to every job a filter matches,
// following the cursors with the progress on stderr; failures exit 1.
func TestJobs_Bulk(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	var jobs []*job.Job
	for i := range 30 {
		typ := "mail"
		if i%3 == 0 {
			typ = "sms"
		}
		jobs = append(jobs, &job.Job{ID: "n-" + strconv.Itoa(i), Queue: "notify", Type: typ, Schedule: job.Schedule{Delay: time.Hour}})
	}
	jobs = append(jobs, &job.Job{ID: "other", Type: "sms", Schedule: job.Schedule{Delay: time.Hour}})
	_, err := b.store.Create(ctx, jobs)
	require.NoError(t, err)
	state := func(id string) job.State {
		info, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		return info.State
	}

	r := b.run(t, "", "jobs", "bulk", "pause", "--queue", "notify", "--type", "sms")
	require.NoError(t, r.err, r.errOut)
	require.Regexp(t, `(?m)^MATCHED\s+CHANGED\s+FAILED\n10\s+10\s+0$`, r.out)
	require.Regexp(t, `(?m)^jobs bulk pause: page 1: \d+ matched, \d+ changed, 0 failed, searched \d+ of \d+$`, r.errOut)
	require.Equal(t, job.StatePaused, state("n-3"))
	require.Equal(t, job.StateScheduled, state("n-1"))
	require.Equal(t, job.StateScheduled, state("other"))

	sum := decodeJSON[ingest.BulkReply](t, b.ok(t, "jobs", "bulk", "delete", "--prefix", "n-1", "--json"))
	require.Equal(t, 11, sum.Changed) // n-1, n-10 … n-19
	_, err = b.store.Get(ctx, "n-12")
	require.ErrorIs(t, err, shard.ErrNotFound)

	// By ids: a missing one fails alone, and the command exits 1.
	r = b.run(t, "", "jobs", "bulk", "cancel", "n-2", "nope")
	require.ErrorContains(t, r.err, "jobs bulk cancel: 1 of 2 failed")
	require.Regexp(t, `(?m)^2\s+1\s+1$`, r.out)
	require.Regexp(t, `(?m)^nope\s+not_found: job "nope" not found$`, r.out)
	require.Equal(t, job.StateCancelled, state("n-2"))

	for _, tc := range []struct{ args []string }{
		{[]string{"jobs", "bulk"}},
		{[]string{"jobs", "bulk", "explode", "--all"}},
		{[]string{"jobs", "bulk", "pause"}},
		{[]string{"jobs", "bulk", "pause", "n-1", "--queue", "notify"}},
		{[]string{"jobs", "bulk", "pause", "--all", "--queue", "notify"}},
	} {
		r := b.run(t, "", tc.args...)
		var ue *usageError
		require.ErrorAs(t, r.err, &ue, "%v", tc.args)
	}
	require.Equal(t, job.StateScheduled, state("other"))
	b.ok(t, "jobs", "bulk", "resume", "--all")
	require.Equal(t, job.StateScheduled, state("n-3"))
}

// tock dead bulk requeues or deletes listed runs, or every dead run of a queue.
func TestDead_Bulk(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	var jobs []*job.Job
	for i := range 6 {
		q := "dq"
		if i == 5 {
			q = "other"
		}
		jobs = append(jobs, &job.Job{ID: "d" + strconv.Itoa(i), Queue: q, Type: "t", Schedule: job.Schedule{Now: true}, Retry: job.RetryPolicy{MaxAttempts: 1}})
	}
	_, err := b.store.Create(ctx, jobs)
	require.NoError(t, err)
	for id := range b.store.Shards() {
		for _, q := range []string{"dq", "other"} {
			cl, err := b.store.Claim(ctx, shard.ID(id), q, 100, "w", "n")
			require.NoError(t, err)
			for _, c := range cl {
				_, err := b.store.FinishRuns(ctx, c.Shard, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: shard.Failed, Error: "boom"}})
				require.NoError(t, err)
			}
		}
	}
	dead := decodeJSON[ingest.DeadList](t, b.ok(t, "dead", "ls", "--queue", "dq", "--json"))
	require.Len(t, dead.Dead, 5)

	out := b.ok(t, "dead", "bulk", "requeue", dead.Dead[0].Run)
	require.Regexp(t, `(?m)^1\s+1\s+0$`, out)
	r := b.run(t, "", "dead", "bulk", "delete", "--queue", "dq")
	require.NoError(t, r.err, r.errOut)
	require.Regexp(t, `(?m)^4\s+4\s+0$`, r.out)
	require.Regexp(t, `(?m)^dead bulk delete: page 1: 4 matched, 4 changed, 0 failed$`, r.errOut)
	require.Empty(t, decodeJSON[ingest.DeadList](t, b.ok(t, "dead", "ls", "--queue", "dq", "--json")).Dead)
	require.Len(t, decodeJSON[ingest.DeadList](t, b.ok(t, "dead", "ls", "--queue", "other", "--json")).Dead, 1)

	r = b.run(t, "", "dead", "bulk", "delete", "x:1")
	require.ErrorContains(t, r.err, "dead bulk delete: 1 of 1 failed")
	for _, args := range [][]string{{"dead", "bulk", "delete"}, {"dead", "bulk", "cancel", "--all"}, {"dead", "bulk", "delete", "--type", "t"}} {
		r := b.run(t, "", args...)
		var ue *usageError
		require.ErrorAs(t, r.err, &ue, "%v", args)
	}
	sum := decodeJSON[ingest.BulkReply](t, b.ok(t, "dead", "bulk", "delete", "--all", "--json"))
	require.Equal(t, 1, sum.Changed)
}

// tock audit prints the audit log, newest first; --json is the API's reply.
func TestAudit(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, ingest.Token{Secret: "cli-write-secret", Scope: ingest.ScopeWrite})
	b.env["TOCK_TOKEN"] = "cli-write-secret"
	ctx := context.Background()
	_, err := b.store.Create(ctx, []*job.Job{{ID: "a1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	b.ok(t, "jobs", "pause", "a1")
	b.ok(t, "queues", "pause", "mail")

	out := b.ok(t, "audit")
	who := ingest.TokenWho("cli-write-secret")
	require.Regexp(t, `(?m)^TIME\s+WHO\s+VIA\s+ACTION\s+TARGET\s+RESULT\s+FROM$`, out)
	require.Regexp(t, `(?m)^\S+ \S+\s+`+who+`\s+api\s+queue\.pause\s+mail\s+ok\s+127\.0\.0\.1:\d+\n\S+ \S+\s+`+who+`\s+api\s+job\.pause\s+a1\s+ok\s+127\.0\.0\.1:\d+$`, out)
	require.NotContains(t, out, "secret")

	p := decodeJSON[ingest.AuditPage](t, b.ok(t, "audit", "--json", "--limit", "1"))
	require.Len(t, p.Entries, 1)
	require.Equal(t, "queue.pause", p.Entries[0].Action)
	require.NotEmpty(t, p.NextCursor)
	p = decodeJSON[ingest.AuditPage](t, b.ok(t, "audit", "--json", "--limit", "1", "--cursor", p.NextCursor))
	require.Equal(t, "job.pause", p.Entries[0].Action)
}
