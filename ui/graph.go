package ui

import (
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// The workflow page draws its graph as SVG on the server, so that the page's live
// fragments (events.go) redraw it like any other fragment and it shows without scripts.
// The layout is the layered one of Sugiyama et al. in its simplest form: a node's
// column is the longest path to it from a root, and the order within a column comes
// from a few sweeps of the barycenter heuristic (a node moves towards the mean position
// of its neighbours in the column before or after). A workflow arrives in an order where
// parents come first, which is all the layering needs. (dagre, the usual JavaScript
// library for this, would need the graph drawn by a script after every live update; a
// graph of at most maxDrawn nodes does not need its refinements.)

// maxDrawn bounds the nodes drawn; a larger workflow shows its counts and node table.
const maxDrawn = 400

// Sizes of the drawing, in SVG user units (px).
const (
	nodeW, nodeH = 150, 40
	gapX, gapY   = 60, 16
	pad          = 8
)

// graphNode is what the layout needs of a node.
type graphNode struct {
	ID        string
	JobID     string
	State     string
	DependsOn []string
	Note      string // shown under the id when State is empty (a definition's node: its type)
}

// drawnNode is a node placed in the drawing.
type drawnNode struct {
	X, Y  int
	W, H  int // its size
	ID    string
	Label string // ID, shortened to fit
	State string
	Note  string
	URL   string // its job's page; "" when it has none (a definition's node)
}

// graph is a laid-out workflow for the template.
type graph struct {
	Width, Height int
	Nodes         []drawnNode
	Edges         []string // SVG path data, parent to child
}

// layout places nodes (parents before children) in columns; nil when there are more
// than maxDrawn or none.
func layout(nodes []graphNode) *graph {
	if len(nodes) == 0 || len(nodes) > maxDrawn {
		return nil
	}
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
	}
	col := make([]int, len(nodes))
	children := make([][]int, len(nodes))
	cols := 1
	for i, n := range nodes {
		for _, p := range n.DependsOn {
			j, ok := index[p]
			if !ok || j >= i {
				continue // not parents-first: drawn without that edge's layering
			}
			col[i] = max(col[i], col[j]+1)
			children[j] = append(children[j], i)
		}
		cols = max(cols, col[i]+1)
	}
	// Columns in first-seen order, then barycenter sweeps: right with parents, left
	// with children.
	byCol := make([][]int, cols)
	for i := range nodes {
		byCol[col[i]] = append(byCol[col[i]], i)
	}
	pos := make([]float64, len(nodes))
	setPos := func(c int) {
		for k, i := range byCol[c] {
			pos[i] = float64(k)
		}
	}
	for c := range byCol {
		setPos(c)
	}
	sweep := func(c int, neighbours func(i int) []int) {
		key := make(map[int]float64, len(byCol[c]))
		for _, i := range byCol[c] {
			ns := neighbours(i)
			if len(ns) == 0 {
				key[i] = pos[i]
				continue
			}
			sum := 0.0
			for _, j := range ns {
				sum += pos[j]
			}
			key[i] = sum / float64(len(ns))
		}
		sort.SliceStable(byCol[c], func(a, b int) bool { return key[byCol[c][a]] < key[byCol[c][b]] })
		setPos(c)
	}
	parents := func(i int) []int {
		var out []int
		for _, p := range nodes[i].DependsOn {
			if j, ok := index[p]; ok && j < i {
				out = append(out, j)
			}
		}
		return out
	}
	for range 3 {
		for c := 1; c < cols; c++ {
			sweep(c, parents)
		}
		for c := cols - 2; c >= 0; c-- {
			sweep(c, func(i int) []int { return children[i] })
		}
	}
	tallest := 0
	for _, c := range byCol {
		tallest = max(tallest, len(c))
	}
	g := &graph{Width: 2*pad + cols*nodeW + (cols-1)*gapX, Height: 2*pad + tallest*nodeH + (tallest-1)*gapY}
	x := make([]int, len(nodes))
	y := make([]int, len(nodes))
	for c, is := range byCol {
		// A short column is centred against the tallest.
		off := (tallest - len(is)) * (nodeH + gapY) / 2
		for k, i := range is {
			x[i], y[i] = pad+c*(nodeW+gapX), pad+off+k*(nodeH+gapY)
		}
	}
	for i, n := range nodes {
		dn := drawnNode{X: x[i], Y: y[i], W: nodeW, H: nodeH, ID: n.ID, Label: shorten(n.ID, 18), State: n.State, Note: shorten(n.Note, 22)}
		if n.JobID != "" {
			dn.URL = Prefix + "/jobs/" + url.PathEscape(n.JobID)
		}
		g.Nodes = append(g.Nodes, dn)
		for _, j := range parents(i) {
			x1, y1 := x[j]+nodeW, y[j]+nodeH/2
			x2, y2 := x[i], y[i]+nodeH/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, "M"+itoa(x1)+","+itoa(y1)+" C"+itoa(mid)+","+itoa(y1)+" "+itoa(mid)+","+itoa(y2)+" "+itoa(x2)+","+itoa(y2))
		}
	}
	return g
}

func itoa(n int) string { return strconv.Itoa(n) }

// shorten cuts s to n runes with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return strings.TrimSpace(string(r[:n-1])) + "…"
}
