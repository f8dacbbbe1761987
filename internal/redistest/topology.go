package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TopologyOptions shapes a Redis Cluster started by [StartTopology].
type TopologyOptions struct {
	// Masters is the number of masters. Default 3.
	Masters int
	// Replicas is the number of replicas of each master. Default 1.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a master may be unreachable before
	// its replica takes over. Default 1s.
	NodeTimeout time.Duration
	// AOF turns on appendonly with appendfsync everysec, as in production.
	AOF bool
}

// Topology is a Redis Cluster with replicas of its own (not shared with other tests),
// for tests that kill and restart nodes: failover, durability.
type Topology struct {
	Nodes []*Node
	opts  TopologyOptions
}

// Node is one redis-server of a Topology.
type Node struct {
	Addr string
	port int
	dir  string
	args []string
	p    *proc
}

// StartTopology starts a cluster of o.Masters masters with o.Replicas replicas each on
// free loopback ports, forms it with redis-cli and waits until every node sees the
// cluster healthy and every replica is in sync. The nodes are killed in t.Cleanup. It
// fails t when redis-server or redis-cli is missing and TOCK_REQUIRE_REDIS=1, and skips
// it otherwise.
func StartTopology(t testing.TB, o TopologyOptions) *Topology {
	t.Helper()
	if err := lookTools(); err != nil {
		if RequireRedis() {
			t.Fatalf("%s=1 but %v", RequireEnv, err)
		}
		t.Skipf("skipping: %v", err)
	}
	if o.Masters == 0 {
		o.Masters = 3
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = time.Second
	}
	dir := t.TempDir()
	tp := &Topology{opts: o}
	t.Cleanup(func() {
		for _, n := range tp.Nodes {
			n.Kill()
		}
	})
	n := o.Masters * (1 + o.Replicas)
	var taken []int
	for i := 0; i < n; i++ {
		port, err := freePort(true, taken...)
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, port)
		sub := filepath.Join(dir, "node-"+strconv.Itoa(port))
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(sub, "nodes.conf"),
			"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
			"--cluster-announce-ip", "127.0.0.1",
			// Replicas sync at once instead of after Redis's default 5s delay.
			"--repl-diskless-sync-delay", "0",
		}
		if o.AOF {
			args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
		}
		node := &Node{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: sub, args: args}
		if err := node.start(); err != nil {
			t.Fatal(err)
		}
		tp.Nodes = append(tp.Nodes, node)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterReadyTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	for _, node := range tp.Nodes {
		args = append(args, node.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, tail(out, 20))
	}
	if err := tp.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	return tp
}

func (n *Node) start() error {
	p, err := startProc(n.dir, n.port, n.args...)
	if err != nil {
		return err
	}
	if err := p.waitPing(serverReadyTimeout); err != nil {
		p.kill()
		return err
	}
	n.p = p
	return nil
}

// Kill kills the node with SIGKILL (no chance to save or hand over) and waits for it
// to exit. Killing a dead node does nothing.
func (n *Node) Kill() {
	if n.p != nil {
		n.p.kill()
	}
}

// Restart starts a killed node again on its port and data directory: it comes back
// with its cluster configuration (and its AOF, when on) and rejoins the cluster, as a
// replica if its master role was taken over meanwhile.
func (n *Node) Restart() error {
	select {
	case <-n.p.done:
	default:
		return fmt.Errorf("restart %s: still running", n.Addr)
	}
	return n.start()
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	if n.p == nil {
		return false
	}
	select {
	case <-n.p.done:
		return false
	default:
		return true
	}
}

// Role returns "master" or "slave" (Redis's word) as the node reports it.
func (n *Node) Role() (string, error) {
	info, err := rawDo(n.Addr, "INFO", "replication")
	if err != nil {
		return "", err
	}
	return parseInfo(info)["role"], nil
}

// Seeds returns the address of every node (a client needs only one).
func (tp *Topology) Seeds() []string {
	out := make([]string, len(tp.Nodes))
	for i, n := range tp.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Masters returns the nodes that are masters now.
func (tp *Topology) Masters() []*Node {
	var out []*Node
	for _, n := range tp.Nodes {
		if role, err := n.Role(); err == nil && role == "master" {
			out = append(out, n)
		}
	}
	return out
}

// WaitHealthy waits until every running node reports cluster_state:ok with every slot
// served and every node known, the configured number of masters, and every replica's
// link to its master up.
func (tp *Topology) WaitHealthy(ctx context.Context) error {
	tick := time.NewTicker(pollTick)
	defer tick.Stop()
	for {
		var bad []string
		masters := 0
		for _, n := range tp.Nodes {
			if !n.Running() {
				continue
			}
			info, err := rawDo(n.Addr, "CLUSTER", "INFO")
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: CLUSTER INFO: %v", n.Addr, err))
				continue
			}
			got := parseInfo(info)
			if got["cluster_state"] != "ok" || got["cluster_slots_assigned"] != "16384" ||
				got["cluster_known_nodes"] != strconv.Itoa(len(tp.Nodes)) {
				bad = append(bad, fmt.Sprintf("%s: state=%s slots=%s known=%s", n.Addr,
					got["cluster_state"], got["cluster_slots_assigned"], got["cluster_known_nodes"]))
				continue
			}
			repl, err := rawDo(n.Addr, "INFO", "replication")
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: INFO replication: %v", n.Addr, err))
				continue
			}
			r := parseInfo(repl)
			switch r["role"] {
			case "master":
				masters++
			case "slave":
				if r["master_link_status"] != "up" || r["master_sync_in_progress"] != "0" {
					bad = append(bad, fmt.Sprintf("%s: replica link %s, sync in progress %s", n.Addr, r["master_link_status"], r["master_sync_in_progress"]))
				}
			}
		}
		if len(bad) == 0 && masters != tp.opts.Masters {
			bad = append(bad, fmt.Sprintf("%d masters, want %d", masters, tp.opts.Masters))
		}
		if len(bad) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy: %s", strings.Join(bad, "; "))
		case <-tick.C:
		}
	}
}

// LogTail returns the end of every node's log, for failure messages.
func (tp *Topology) LogTail() string {
	var sb strings.Builder
	for _, n := range tp.Nodes {
		if n.p != nil {
			sb.WriteString(n.p.logTail())
		}
	}
	return sb.String()
}
