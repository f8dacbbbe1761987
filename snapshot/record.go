package snapshot

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// record is one line of a shard file: one job, or (format 2) one workflow with its
// nodes' jobs, as JSON.
//
//	{"id":"invoice-42","exp":1767366245123,"f":{"st":"scheduled","nx":"1767366300000",...},"b":{"p":"AAEC/w=="}}
//	{"wf":"etl-7","f":{"st":"running","nodes":"a,b",...},"nodes":[{"id":"etl-7@a","f":{...}},...]}
//
// f holds the fields of the job's (or workflow's) hash whose values are valid UTF-8, b
// (base64) the others, so any payload bytes round-trip; exp, when present, is the expiry
// time in ms since the epoch. A workflow's record has wf instead of id, and its nodes'
// jobs, each a job's record, in nodes: the workflow and its nodes were read in one step.
type record struct {
	ID       string            `json:"id,omitempty"`
	Workflow string            `json:"wf,omitempty"`
	Expiry   int64             `json:"exp,omitempty"`
	Fields   map[string]string `json:"f"`
	Binary   map[string][]byte `json:"b,omitempty"`
	Nodes    []record          `json:"nodes,omitempty"`
}

// item is what a record holds: a job, or a workflow.
type item struct {
	job      shard.JobRecord
	workflow *shard.WorkflowRecord
}

// jobs is how many jobs the item holds: one, or a workflow's nodes.
func (it item) jobs() int64 {
	if it.workflow != nil {
		return int64(len(it.workflow.Nodes))
	}
	return 1
}

// newRecord returns the record of a job read from Redis.
func newRecord(j shard.JobRecord) record {
	r := record{ID: j.ID, Expiry: j.ExpireAt}
	r.Fields, r.Binary = splitFields(j.Fields)
	return r
}

// newWorkflowRecord returns the record of a workflow read from Redis, with its nodes.
func newWorkflowRecord(w shard.WorkflowRecord) record {
	r := record{Workflow: w.ID, Expiry: w.ExpireAt, Nodes: make([]record, len(w.Nodes))}
	r.Fields, r.Binary = splitFields(w.Fields)
	for i, j := range w.Nodes {
		r.Nodes[i] = newRecord(j)
	}
	return r
}

// splitFields splits a hash's field/value pairs into those whose values are valid UTF-8
// and the others.
func splitFields(fields []string) (text map[string]string, binary map[string][]byte) {
	text = make(map[string]string, len(fields)/2)
	for k := 0; k+1 < len(fields); k += 2 {
		if v := fields[k+1]; utf8.ValidString(v) {
			text[fields[k]] = v
		} else {
			if binary == nil {
				binary = map[string][]byte{}
			}
			binary[fields[k]] = []byte(v)
		}
	}
	return text, binary
}

// item checks r, a record of a snapshot of format, and returns what it holds.
func (r record) item(format int) (item, error) {
	if r.Workflow == "" {
		if len(r.Nodes) > 0 {
			return item{}, fmt.Errorf("job %q: has nodes", r.ID)
		}
		j, err := r.job()
		return item{job: j}, err
	}
	if format < 2 {
		return item{}, fmt.Errorf("workflow %q: format %d holds no workflows", r.Workflow, format)
	}
	if r.ID != "" {
		return item{}, fmt.Errorf("workflow %q: has a job id %q too", r.Workflow, r.ID)
	}
	if err := job.ValidateRef("workflow id", r.Workflow, job.MaxWorkflowIDLen); err != nil {
		return item{}, err
	}
	if strings.Count(r.Workflow, string(job.NodeSep)) > 1 {
		return item{}, fmt.Errorf("workflow %q: more than one '@'", r.Workflow)
	}
	if r.Expiry < 0 {
		return item{}, fmt.Errorf("workflow %q: negative expiry time", r.Workflow)
	}
	fields, err := joinFields("workflow "+strconv.Quote(r.Workflow), r.Fields, r.Binary)
	if err != nil {
		return item{}, err
	}
	if _, ok := r.Fields["st"]; !ok {
		return item{}, fmt.Errorf("workflow %q: no state field", r.Workflow)
	}
	nodes := map[string]bool{}
	for n := range strings.SplitSeq(r.Fields["nodes"], ",") {
		if n != "" {
			nodes[n] = false
		}
	}
	w := &shard.WorkflowRecord{ID: r.Workflow, ExpireAt: r.Expiry, Fields: fields, Nodes: make([]shard.JobRecord, 0, len(r.Nodes))}
	for _, nr := range r.Nodes {
		if nr.Workflow != "" || len(nr.Nodes) > 0 {
			return item{}, fmt.Errorf("workflow %q: a node record is no job's", r.Workflow)
		}
		j, err := nr.job()
		if err != nil {
			return item{}, fmt.Errorf("workflow %q: %w", r.Workflow, err)
		}
		wf, node, ok := job.SplitNodeJobID(j.ID)
		seen, listed := nodes[node]
		switch {
		case !ok || wf != r.Workflow || !listed:
			return item{}, fmt.Errorf("workflow %q: job %q is none of its nodes", r.Workflow, j.ID)
		case seen:
			return item{}, fmt.Errorf("workflow %q: node job %q given twice", r.Workflow, j.ID)
		}
		nodes[node] = true
		w.Nodes = append(w.Nodes, j)
	}
	// A node that waits for its parents or was released has its job (only an ended
	// node's may have expired): restored without it, the node would never run nor end,
	// and its workflow would run for ever.
	for node, seen := range nodes {
		if st, _, _ := strings.Cut(r.Fields["s:"+node], "|"); !seen && (st == "waiting" || st == "released") {
			return item{}, fmt.Errorf("workflow %q: node %q is %s and its job %q is missing", r.Workflow, node, st, job.NodeJobID(r.Workflow, node))
		}
	}
	return item{workflow: w}, nil
}

// job checks r and returns the job it holds, its fields in name order.
func (r record) job() (shard.JobRecord, error) {
	if err := job.ValidateRef("id", r.ID, job.MaxIDLen); err != nil {
		return shard.JobRecord{}, err
	}
	if r.Expiry < 0 {
		return shard.JobRecord{}, fmt.Errorf("job %q: negative expiry time", r.ID)
	}
	if _, ok := r.Fields["st"]; !ok {
		return shard.JobRecord{}, fmt.Errorf("job %q: no state field", r.ID)
	}
	fields, err := joinFields("job "+strconv.Quote(r.ID), r.Fields, r.Binary)
	if err != nil {
		return shard.JobRecord{}, err
	}
	j := shard.JobRecord{ID: r.ID, ExpireAt: r.Expiry, Fields: fields}
	// What the restore files the job's runs from: refused here, before anything is
	// written, rather than failing a restore_jobs call half-way.
	if err := j.Check(); err != nil {
		return shard.JobRecord{}, err
	}
	return j, nil
}

// joinFields returns a record's fields as field/value pairs in name order; what names
// the record, for errors.
func joinFields(what string, text map[string]string, binary map[string][]byte) ([]string, error) {
	names := make([]string, 0, len(text)+len(binary))
	for f := range text {
		names = append(names, f)
	}
	for f := range binary {
		if _, ok := text[f]; ok {
			return nil, fmt.Errorf("%s: field %q given twice", what, f)
		}
		names = append(names, f)
	}
	sort.Strings(names)
	out := make([]string, 0, 2*len(names))
	for _, f := range names {
		v, ok := text[f]
		if !ok {
			v = string(binary[f])
		}
		out = append(out, f, v)
	}
	return out, nil
}
