package ui

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A diamond lays out in three columns, the branches one above the other, the join
// centred; every edge goes from a parent's right side to a child's left side.
func TestLayout_Diamond(t *testing.T) {
	g := layout([]graphNode{
		{ID: "a", JobID: "w@a"}, {ID: "b", JobID: "w@b", DependsOn: []string{"a"}},
		{ID: "c", JobID: "w@c", DependsOn: []string{"a"}}, {ID: "d", JobID: "w@d", DependsOn: []string{"b", "c"}},
	})
	require.NotNil(t, g)
	at := map[string]drawnNode{}
	for _, n := range g.Nodes {
		at[n.ID] = n
	}
	require.Equal(t, at["b"].X, at["c"].X)
	require.Less(t, at["a"].X, at["b"].X)
	require.Less(t, at["b"].X, at["d"].X)
	require.NotEqual(t, at["b"].Y, at["c"].Y)
	require.Equal(t, at["a"].Y, at["d"].Y, "a single node in its column is centred")
	require.Len(t, g.Edges, 4)
	require.Equal(t, "/ui/jobs/w@d", at["d"].URL)
	require.Equal(t, 2*pad+3*nodeW+2*gapX, g.Width)
}

// The barycenter sweeps untangle crossing edges: two chains submitted crosswise end up
// side by side.
func TestLayout_Uncrosses(t *testing.T) {
	g := layout([]graphNode{
		{ID: "a1"}, {ID: "b1"}, {ID: "b2", DependsOn: []string{"b1"}}, {ID: "a2", DependsOn: []string{"a1"}},
	})
	at := map[string]drawnNode{}
	for _, n := range g.Nodes {
		at[n.ID] = n
	}
	require.Equal(t, at["a1"].Y, at["a2"].Y)
	require.Equal(t, at["b1"].Y, at["b2"].Y)
}

func TestLayout_TooLarge(t *testing.T) {
	nodes := make([]graphNode, maxDrawn+1)
	for i := range nodes {
		nodes[i].ID = "n" + strconv.Itoa(i)
	}
	require.Nil(t, layout(nodes))
	require.Nil(t, layout(nil))
	require.Equal(t, "abcdefgh…", shorten("abcdefghijkl", 9))
}
