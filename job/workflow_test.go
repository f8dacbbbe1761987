package job

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func wfNode(id string, deps ...string) Node {
	return Node{Job: Job{ID: id, Type: "t"}, DependsOn: deps}
}

// Submit-time validation names the node at fault: unknown dependency, a cycle (named),
// a duplicate id, too many nodes, a schedule on a node, a bad rule.
func TestWorkflow_NormalizeErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		w     Workflow
		field string
		msg   string
	}{
		"unknown dependency": {Workflow{ID: "w", Jobs: []Node{wfNode("a"), wfNode("b", "c")}}, "jobs[1].depends_on", `node "b" depends on "c", which is no node of the workflow`},
		"cycle": {Workflow{ID: "w", Jobs: []Node{wfNode("root"), wfNode("a", "root", "c"), wfNode("b", "a"), wfNode("c", "b")}},
			"jobs", "dependency cycle: a → b → c → a"},
		"self":      {Workflow{ID: "w", Jobs: []Node{wfNode("a", "a")}}, "jobs", "dependency cycle: a → a"},
		"duplicate": {Workflow{ID: "w", Jobs: []Node{wfNode("a"), wfNode("b"), wfNode("a")}}, "jobs[2].id", `duplicate node id "a" (also jobs[0])`},
		"twice":     {Workflow{ID: "w", Jobs: []Node{wfNode("a"), wfNode("b", "a", "a")}}, "jobs[1].depends_on", `node "b" names "a" twice`},
		"no id":     {Workflow{ID: "w", Jobs: []Node{wfNode("")}}, "jobs[0].id", "is required: a node is named by its id"},
		"node @":    {Workflow{ID: "w", Jobs: []Node{wfNode("a@b")}}, "jobs[0].id", `"a@b": character '@' at 1 is not one of A-Z a-z 0-9 . _ ~ -`},
		"id @":      {Workflow{ID: "w@1", Jobs: []Node{wfNode("a")}}, "id", `"w@1": character '@' at 1 is not one of A-Z a-z 0-9 . _ ~ -`},
		"empty":     {Workflow{ID: "w"}, "jobs", "a workflow needs at least one job"},
		"schedule": {Workflow{ID: "w", Jobs: []Node{{Job: Job{ID: "a", Type: "t", Schedule: Schedule{Cron: "* * * * *"}}}}},
			"jobs[0].schedule", `node "a": a node has no schedule: it starts when its rule is met`},
		"rule": {Workflow{ID: "w", Jobs: []Node{{Job: Job{ID: "a", Type: "t"}, Rule: "most_success"}}},
			"jobs[0].rule", `node "a": must be all_success, all_done, one_success, one_failed or none_failed, got "most_success"`},
		"type":          {Workflow{ID: "w", Jobs: []Node{{Job: Job{ID: "a"}}}}, "jobs[0].type", `node "a": is required (or a target)`},
		"overlap alone": {Workflow{ID: "w", Jobs: []Node{wfNode("a")}, Overlap: OverlapAllow}, "schedule", "overlap and misfire apply to a scheduled workflow only: a cron schedule is required"},
		"not cron":      {Workflow{ID: "w", Jobs: []Node{wfNode("a")}, Schedule: &Schedule{Now: true}}, "schedule", "a workflow's schedule is a cron expression (with an optional timezone)"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.w.Normalize(0, 0)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field)
			require.Equal(t, tc.msg, fe.Msg)
		})
	}

	var many []Node
	for i := range 11 {
		many = append(many, wfNode("n"+strconv.Itoa(i)))
	}
	err := (&Workflow{ID: "w", Jobs: many}).Normalize(10, 0)
	require.EqualError(t, err, "jobs: 11 jobs is over the limit of 10")
}

// Normalize orders nodes parents first, keeping the given order where it may, and fills
// the defaults; a normalised workflow normalises again unchanged.
func TestWorkflow_NormalizeOrders(t *testing.T) {
	w := Workflow{ID: "w", Jobs: []Node{wfNode("load", "transform", "audit"), wfNode("audit"), wfNode("extract"), wfNode("transform", "extract")}}
	require.NoError(t, w.Normalize(0, 0))
	var ids []string
	for _, n := range w.Jobs {
		ids = append(ids, n.ID)
		require.Equal(t, RuleAllSuccess, n.Rule)
		require.True(t, n.Schedule.Now)
	}
	require.Equal(t, []string{"audit", "extract", "transform", "load"}, ids)
	again := w
	require.NoError(t, again.Normalize(0, 0))
	require.Equal(t, w, again)
	require.Equal(t, map[string][]string{"audit": {"load"}, "extract": {"transform"}, "transform": {"load"}}, w.Children())
}

func TestValidateRef(t *testing.T) {
	require.NoError(t, ValidateRef("id", "wf@node", MaxIDLen))
	require.NoError(t, ValidateRef("id", "def@1700000000000@node", MaxIDLen))
	require.NoError(t, ValidateRef("id", "plain", MaxIDLen))
	require.EqualError(t, ValidateRef("id", "wf@", MaxIDLen), `id: "wf@": an empty part between '@'s`)
	require.EqualError(t, ValidateRef("id", "w f@x", MaxIDLen), `id: "w f@x": "w f": character ' ' at 1 is not one of A-Z a-z 0-9 . _ ~ -`)
	wf, node, ok := SplitNodeJobID(NodeJobID("def@17", "n"))
	require.True(t, ok)
	require.Equal(t, "def@17", wf)
	require.Equal(t, "n", node)
}

func TestValidateWorkflowPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix string
		err    string // "" means valid
	}{
		{"", ""},
		{"n", ""},
		{"nightly-etl", ""},
		{".", ""}, // ".a" is an id
		{"nightly@", ""},
		{"nightly@1893466800000", ""},
		{"nightly@18", ""},
		{strings.Repeat("x", MaxWorkflowIDLen), ""},
		{strings.Repeat("x", MaxScheduledWorkflowIDLen) + "@1", ""},
		{strings.Repeat("x", MaxWorkflowIDLen+1), `prefix: 65 bytes is longer than any workflow id (at most 64)`},
		{"a b", `prefix: "a b": character ' ' at 1 is in no workflow id (A-Z a-z 0-9 . _ ~ -, and '@' in an instance's)`},
		{"a*", `prefix: "a*": character '*' at 1 is in no workflow id (A-Z a-z 0-9 . _ ~ -, and '@' in an instance's)`},
		{"a/b", `prefix: "a/b": character '/' at 1 is in no workflow id (A-Z a-z 0-9 . _ ~ -, and '@' in an instance's)`},
		{"@", `prefix: "@": no workflow id starts with '@' (an instance's is <definition id>@<due ms>)`},
		{"a@1@", `prefix: "a@1@": no workflow id has two '@'s (an instance's is <definition id>@<due ms>)`},
		{"a@x", `prefix: "a@x": after '@' an instance's id has only digits (its due time in ms)`},
		{"a@12345678901234", `prefix: "a@12345678901234": an instance's due time in ms has at most 13 digits`},
		{"..@1", `prefix: "..@1": ".." is no scheduled workflow's id`},
		{strings.Repeat("x", MaxScheduledWorkflowIDLen+1) + "@", `prefix: "` + strings.Repeat("x", MaxScheduledWorkflowIDLen+1) + `@": a scheduled workflow's id, before an instance's '@', is at most 50 bytes`},
	} {
		err := ValidateWorkflowPrefix("prefix", tc.prefix)
		if tc.err == "" {
			require.NoError(t, err, tc.prefix)
			continue
		}
		require.EqualError(t, err, tc.err)
		var fe *FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "prefix", fe.Field)
	}
}

// FuzzValidateWorkflowPrefix checks both ways: every prefix of a workflow's or an
// instance's id is accepted, and an accepted prefix starts some id that is one.
func FuzzValidateWorkflowPrefix(f *testing.F) {
	f.Add("nightly", uint64(1893466800000), "nightly@18")
	f.Add("..", uint64(0), "..")
	f.Add("a", uint64(7), "a@@")
	f.Fuzz(func(t *testing.T, id string, ms uint64, p string) {
		if ValidateID("id", id, MaxWorkflowIDLen) == nil {
			for i := 0; i <= len(id); i++ {
				require.NoError(t, ValidateWorkflowPrefix("prefix", id[:i]), "a prefix of workflow id %q", id)
			}
		}
		if ValidateID("id", id, MaxScheduledWorkflowIDLen) == nil {
			inst := id + "@" + strconv.FormatUint(ms%10_000_000_000_000, 10)
			for i := 0; i <= len(inst); i++ {
				require.NoError(t, ValidateWorkflowPrefix("prefix", inst[:i]), "a prefix of instance id %q", inst)
			}
		}
		if ValidateWorkflowPrefix("prefix", p) != nil {
			return
		}
		// An id that starts with p: p itself completed.
		def, due, instance := strings.Cut(p, "@")
		if !instance {
			full := p + strings.Repeat("x", min(1, MaxWorkflowIDLen-len(p)))
			require.NoError(t, ValidateID("id", full, MaxWorkflowIDLen), "prefix %q", p)
			return
		}
		require.NoError(t, ValidateID("id", def, MaxScheduledWorkflowIDLen), "prefix %q", p)
		_, err := strconv.ParseUint(due+"0", 10, 64)
		require.NoError(t, err, "prefix %q", p)
	})
}
