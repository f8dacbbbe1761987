package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ReplicaSet is a standalone primary with replicas of its own (not shared with other
// tests), for tests of replication: WAIT, replicas that stop confirming (Freeze).
type ReplicaSet struct {
	// Primary is the primary's address; Backend connects to it.
	Primary string
	// Replicas are the replicas' addresses, in the order the methods number them.
	Replicas []string
	replicas []*proc
}

// StartReplicaSet starts a primary and n replicas of it on free loopback ports, without
// persistence, and waits until every replica is in sync. The processes are killed in
// t.Cleanup. It fails t when redis-server is missing and TOCK_REQUIRE_REDIS=1, and skips
// it otherwise.
func StartReplicaSet(t testing.TB, n int) *ReplicaSet {
	t.Helper()
	if err := lookTools(); err != nil {
		if RequireRedis() {
			t.Fatalf("%s=1 but %v", RequireEnv, err)
		}
		t.Skipf("skipping: %v", err)
	}
	rs := &ReplicaSet{}
	dir := t.TempDir()
	var ps []*proc
	t.Cleanup(func() {
		for _, p := range ps {
			p.kill()
		}
	})
	start := func(role string, extra ...string) *proc {
		p, err := retryPorts(func(attempt int) (*proc, error) {
			return startServer(dir, role, attempt, extra...)
		})
		if err != nil {
			t.Fatalf("redistest: starting the %s: %v", role, err)
		}
		ps = append(ps, p)
		return p
	}
	rs.Primary = start("primary", "--repl-diskless-sync-delay", "0").addr
	host, port, _ := strings.Cut(rs.Primary, ":")
	for i := 0; i < n; i++ {
		p := start("replica", "--replicaof", host, port)
		rs.Replicas = append(rs.Replicas, p.addr)
		rs.replicas = append(rs.replicas, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), serverReadyTimeout)
	defer cancel()
	if err := rs.WaitSynced(ctx); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return rs
}

// Backend is the primary as a standalone backend (Name Server).
func (rs *ReplicaSet) Backend() Backend {
	return Backend{Name: Server, Addrs: []string{rs.Primary}}
}

// Replica is replica i as a standalone backend, to read what it holds.
func (rs *ReplicaSet) Replica(i int) Backend {
	return Backend{Name: Server, Addrs: []string{rs.Replicas[i]}}
}

// Freeze stops replica i's process (SIGSTOP): it stays connected to the primary but
// applies and confirms nothing until Thaw, like a replica stuck or cut off by the
// network. Not supported on Windows.
func (rs *ReplicaSet) Freeze(i int) error { return rs.replicas[i].freeze() }

// Thaw resumes a frozen replica (SIGCONT); it then catches up.
func (rs *ReplicaSet) Thaw(i int) error { return rs.replicas[i].thaw() }

// Freeze stops the node's process (SIGSTOP) until Thaw, as ReplicaSet.Freeze does.
func (n *Node) Freeze() error { return n.p.freeze() }

// Thaw resumes a frozen node (SIGCONT).
func (n *Node) Thaw() error { return n.p.thaw() }

// WaitSynced waits until the primary counts every replica as connected and each
// replica's link is up and holds the primary's replication offset.
func (rs *ReplicaSet) WaitSynced(ctx context.Context) error {
	tick := time.NewTicker(pollTick)
	defer tick.Stop()
	for {
		bad := rs.syncState()
		if bad == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replicas not in sync: %s", bad)
		case <-tick.C:
		}
	}
}

// syncState returns "" when every replica is in sync, else what is not.
func (rs *ReplicaSet) syncState() string {
	info, err := rawDo(rs.Primary, "INFO", "replication")
	if err != nil {
		return fmt.Sprintf("INFO on primary %s: %v", rs.Primary, err)
	}
	p := parseInfo(info)
	if p["connected_slaves"] != strconv.Itoa(len(rs.Replicas)) {
		return fmt.Sprintf("primary %s has %s connected replicas, want %d", rs.Primary, p["connected_slaves"], len(rs.Replicas))
	}
	for _, addr := range rs.Replicas {
		info, err := rawDo(addr, "INFO", "replication")
		if err != nil {
			return fmt.Sprintf("INFO on replica %s: %v", addr, err)
		}
		r := parseInfo(info)
		if r["master_link_status"] != "up" || r["slave_repl_offset"] != p["master_repl_offset"] {
			return fmt.Sprintf("replica %s: link %s, offset %s of %s", addr, r["master_link_status"], r["slave_repl_offset"], p["master_repl_offset"])
		}
	}
	return ""
}
