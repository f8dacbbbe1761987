package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

const cliWorkflow = `{"id": "etl", "jobs": [
  {"id": "extract", "type": "etl.extract", "retry": {"max_attempts": 1}},
  {"id": "load", "type": "etl.load", "depends_on": ["extract"]},
  {"id": "alert", "type": "etl.alert", "depends_on": ["extract"], "rule": "one_failed"}]}`

// finishRuns ends every ready run of workflow wf's shard: failed for the nodes fail
// names, succeeded with the result "ok <node>" for the others.
func (b *apiBundle) finishRuns(t *testing.T, wf string, fail ...string) {
	t.Helper()
	ctx := t.Context()
	id := b.store.ShardOf(wf)
	runs, err := b.store.Claim(ctx, id, "default", 100, "w", "n")
	require.NoError(t, err)
	var fs []shard.Finish
	for _, r := range runs {
		_, node, _ := job.SplitNodeJobID(r.JobID)
		f := shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded, Result: []byte("ok " + node)}
		for _, n := range fail {
			if n == node {
				f = shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Failed, Error: "no"}
			}
		}
		fs = append(fs, f)
	}
	if len(fs) > 0 {
		_, err = b.store.FinishRuns(ctx, id, fs)
		require.NoError(t, err)
	}
}

func TestWorkflows_CLI(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	file := filepath.Join(t.TempDir(), "etl.json")
	require.NoError(t, os.WriteFile(file, []byte(cliWorkflow), 0o600))

	out := b.ok(t, "workflows", "create", "--file", file)
	require.Regexp(t, `(?m)^ID\s+STATE\s+NODES\s+SHARD\s+RESULT$`, out)
	require.Regexp(t, `(?m)^etl\s+running\s+3\s+\d+\s+created$`, out)
	r := b.run(t, cliWorkflow, "workflows", "create", "--file", "-")
	require.NoError(t, r.err)
	require.Contains(t, r.out, "exists")
	r = b.run(t, strings.Replace(cliWorkflow, "one_failed", "all_done", 1), "workflows", "create", "--file", "-")
	require.ErrorContains(t, r.err, "409 conflict")
	require.ErrorContains(t, r.err, `"alert" (its dependencies or rule)`)
	r = b.run(t, `{"jobs":[{"id":"a","type":"t","depends_on":["b"]}]}`, "workflows", "create", "--file", "-")
	require.ErrorContains(t, r.err, "jobs[0].depends_on")
	r = b.run(t, `{"jobs":[{"id":"a","typo":"t"}]}`, "workflows", "create", "--file", "-")
	require.ErrorContains(t, r.err, `jobs[0].typo: unknown field`)
	r = b.run(t, "", "workflows", "create")
	var ue *usageError
	require.ErrorAs(t, r.err, &ue)

	out = b.ok(t, "workflows", "get", "etl")
	require.Regexp(t, `(?m)^state:\s+running$`, out)
	require.Regexp(t, `(?m)^NODE\s+STATE\s+RULE\s+DEPENDS ON\s+ATTEMPTS\s+RELEASED\s+ENDED\s+RESULT$`, out)
	require.Regexp(t, `(?m)^extract\s+ready\s+all_success\s+-\s+0\s+\S+ \S+\s+-\s+-$`, out)
	require.Regexp(t, `(?m)^alert\s+waiting\s+one_failed\s+extract\s+0\s+-\s+-\s+-$`, out)
	w := decodeJSON[ingest.Workflow](t, b.ok(t, "workflows", "get", "etl", "--json"))
	require.Len(t, w.Nodes, 3)

	b.finishRuns(t, "etl", "extract")
	b.finishRuns(t, "etl")
	out = b.ok(t, "workflows", "get", "etl")
	require.Regexp(t, `(?m)^state:\s+failed$`, out)
	require.Regexp(t, `(?m)^load\s+upstream_failed\s`, out)
	require.Regexp(t, `(?m)^alert\s+succeeded\s+one_failed\s+extract\s+1\s.*\s8 B$`, out)
	require.Equal(t, "ok alert", b.ok(t, "workflows", "result", "etl", "alert"))
	r = b.run(t, "", "workflows", "result", "etl", "load")
	require.ErrorContains(t, r.err, "404 not_found")

	out = b.ok(t, "workflows", "ls", "--state", "failed")
	require.Regexp(t, `(?m)^ID\s+STATE\s+NODES\s+LEFT\s+CREATED\s+ENDED$`, out)
	require.Regexp(t, `(?m)^etl\s+failed\s+3\s+0\s`, out)
	r = b.run(t, "", "workflows", "ls", "--state", "running")
	require.NoError(t, r.err)
	require.Contains(t, r.errOut, "no workflows")

	out = b.ok(t, "workflows", "retry", "etl")
	require.Regexp(t, `(?m)^etl\s+running\s+true$`, out)
	out = b.ok(t, "workflows", "cancel", "etl", "--json")
	require.Equal(t, ingest.StateReply{ID: "etl", State: "cancelled", Changed: true}, decodeJSON[ingest.StateReply](t, out))
	r = b.run(t, "", "workflows", "cancel", "nope")
	require.ErrorContains(t, r.err, "404 not_found")

	// A scheduled workflow: its definition and the operations on it.
	def := `{"id":"nightly","jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","depends_on":["a"]}],"schedule":{"cron":"0 3 * * *","timezone":"Europe/Berlin"}}`
	out = b.run(t, def, "workflows", "create", "--file", "-").out
	require.Regexp(t, `(?m)^nightly\s+scheduled\s+2\s+\d+\s+created$`, out)
	out = b.ok(t, "workflows", "get", "nightly")
	require.Regexp(t, `(?m)^state:\s+scheduled$`, out)
	require.Regexp(t, `(?m)^schedule:\s+cron "0 3 \* \* \*" Europe/Berlin$`, out)
	require.Regexp(t, `(?m)^overlap:\s+skip$`, out)
	require.Regexp(t, `(?m)^NODE\s+TYPE\s+QUEUE\s+RULE\s+DEPENDS ON$`, out)
	require.Regexp(t, `(?m)^b\s+t\s+default\s+all_success\s+a$`, out)
	out = b.ok(t, "workflows", "ls", "--state", "scheduled")
	require.Regexp(t, `(?m)^nightly\s+scheduled\s+cron "0 3 \* \* \*" Europe/Berlin\s+\S+ \S+\s+2$`, out)
	require.Regexp(t, `(?m)^nightly\s+paused\s+true$`, b.ok(t, "workflows", "pause", "nightly"))
	require.Contains(t, b.ok(t, "workflows", "ls", "--state", "scheduled"), "scheduled (paused)")
	require.Regexp(t, `(?m)^nightly\s+scheduled\s+true$`, b.ok(t, "workflows", "resume", "nightly"))
	out = b.ok(t, "workflows", "trigger", "nightly")
	require.Regexp(t, `(?m)^nightly\s+nightly:\d+\s+nightly@\d+$`, out)
	r = b.run(t, "", "workflows", "pause", "etl")
	require.ErrorContains(t, r.err, "only a scheduled workflow's definition can be paused")
	require.Regexp(t, `(?m)^nightly\s+deleted\s+true$`, b.ok(t, "workflows", "rm", "nightly"))
	r = b.run(t, "", "workflows", "get", "nightly")
	require.ErrorContains(t, r.err, "404 not_found")
}

// tock workflows ls --prefix: the workflows whose id starts with it, the instances of a
// scheduled workflow with DEF@ (a held one marked); a prefix no workflow id could start
// with is the API's 400, naming prefix.
func TestWorkflows_CLIPrefix(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := t.Context()
	def := `{"id":"nightly","jobs":[{"id":"a","type":"t"}],"schedule":{"cron":"0 3 * * *"},"overlap":"buffer_one"}`
	require.NoError(t, b.run(t, def, "workflows", "create", "--file", "-").err)
	require.NoError(t, b.run(t, cliWorkflow, "workflows", "create", "--file", "-").err)
	info, err := b.store.Get(ctx, "nightly")
	require.NoError(t, err)
	t0 := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
	for k := range 2 {
		_, err := b.store.StartInstance(ctx, "nightly", t0.Add(time.Duration(k)*24*time.Hour), info.Payload)
		require.NoError(t, err)
	}

	out := b.ok(t, "workflows", "ls", "--prefix", "nightly@", "--all")
	require.Regexp(t, `(?m)^ID\s+STATE\s+NODES\s+LEFT\s+CREATED\s+ENDED$`, out)
	require.Regexp(t, `(?m)^nightly@1893466800000\s+running\s+1\s+1\s`, out)
	require.Regexp(t, `(?m)^nightly@1893553200000\s+running \(held\)\s+1\s+1\s`, out)
	require.NotContains(t, out, "etl")
	l := decodeJSON[ingest.WorkflowList](t, b.ok(t, "workflows", "ls", "--prefix", "nightly@18935", "--all", "--json"))
	require.Len(t, l.Workflows, 1)
	require.Equal(t, "nightly@1893553200000", l.Workflows[0].ID)
	require.True(t, l.Workflows[0].Held)
	require.Contains(t, b.ok(t, "workflows", "ls", "--prefix", "e", "--all"), "etl")
	out = b.ok(t, "workflows", "ls", "--prefix", "night", "--state", "scheduled", "--all")
	require.Regexp(t, `(?m)^nightly\s+scheduled\s`, out)
	r := b.run(t, "", "workflows", "ls", "--prefix", "zz@", "--all")
	require.NoError(t, r.err)
	require.Contains(t, r.errOut, "no workflows")

	r = b.run(t, "", "workflows", "ls", "--prefix", "nightly@x")
	require.ErrorContains(t, r.err, "400 invalid_argument: prefix: ")
	require.ErrorContains(t, r.err, `"nightly@x": after '@' an instance's id has only digits`)
}

// A file the CLI cannot decode names the node at fault, as the API would: in a file of
// many nodes, "json: unknown field" alone does not say where.
func TestWorkflows_CLICreateBadFileNamesTheNode(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	for body, want := range map[string]string{
		`{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","shedule":{}}]}`:     `jobs[1].shedule: unknown field`,
		`{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","priority":"x"}]}`:   `jobs[1].priority: must be an integer, got string`,
		`{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","depends_on":"a"}]}`: `jobs[1].depends_on: must be an array, got string`,
	} {
		r := b.run(t, body, "workflows", "create", "--file", "-")
		require.ErrorContains(t, r.err, want)
	}
}
