package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Durability says what an accepted write waits for before it is acknowledged.
//
// With Replicas 0 (the default) a write is acknowledged once the Redis primary has
// applied it: it is as durable as the primary's AOF (lost writes of the last second with
// appendfsync everysec) and its asynchronous replication (writes not yet sent to a
// replica are lost when that replica is promoted).
//
// With Replicas N ≥ 1, the writes that must not be lost (creates and the management
// operations: cancel, pause, resume, trigger, update, requeue and delete of dead runs,
// pause and resume of queues) are followed, in the same round trip and on the same
// connection, by a WAIT for N replicas. When fewer than N confirm within Timeout the
// call fails with a *ReplicationError (errors.Is ErrNotReplicated); the write was
// applied on the primary and may or may not survive a failover, and the caller may
// retry it (creates are idempotent by job id). The work of dispatchers and workers
// (fires, claims, heartbeats, acks, fails, reaping, leases) does not wait: losing some
// of it in a failover makes runs fire or run again (at least once), never lost. See
// docs/durability.md.
type Durability struct {
	// Replicas is how many replicas must confirm a write (Redis WAIT) before it is
	// acknowledged. 0 (the default) relies on AOF and asynchronous replication.
	Replicas int
	// Timeout bounds the wait for the replicas. Default 1s.
	Timeout time.Duration
}

// MaxReplicas bounds Durability.Replicas.
const MaxReplicas = 16

// ParseDurability parses a --durability setting: "" or "async" (the default), or
// "replicas:N" with N from 1 to MaxReplicas.
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "", "async":
		return Durability{}, nil
	}
	n, ok := strings.CutPrefix(s, "replicas:")
	if !ok {
		return Durability{}, fmt.Errorf("durability %q: want async or replicas:N", s)
	}
	r, err := strconv.Atoi(n)
	if err != nil || r < 1 || r > MaxReplicas {
		return Durability{}, fmt.Errorf("durability %q: N must be a whole number from 1 to %d", s, MaxReplicas)
	}
	return Durability{Replicas: r}, nil
}

// String is the --durability form of d.
func (d Durability) String() string {
	if d.Replicas == 0 {
		return "async"
	}
	return "replicas:" + strconv.Itoa(d.Replicas)
}

// ErrNotReplicated matches a *ReplicationError.
var ErrNotReplicated = errors.New("write not confirmed by enough replicas")

// ReplicationError reports a write that fewer replicas than Durability.Replicas
// confirmed within Durability.Timeout. The write was applied on the primary (unless the
// script itself failed, which is reported instead): it is visible, but a failover to a
// replica that did not receive it loses it. Retrying is safe: creates are idempotent by
// job id, and the management operations end in the same state when repeated; a retry
// that finds its change already made is confirmed only once the replicas hold it.
type ReplicationError struct {
	Want    int           // replicas asked for
	Got     int           // replicas that confirmed in time
	Timeout time.Duration // how long WAIT waited
	Err     error         // why WAIT could not run (connection lost, the node is a replica...), or nil
}

func (e *ReplicationError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("wait for %d replica(s): %v", e.Want, e.Err)
	}
	return fmt.Sprintf("%d of %d replica(s) confirmed the write within %s", e.Got, e.Want, e.Timeout)
}

// Is makes errors.Is(err, ErrNotReplicated) true.
func (e *ReplicationError) Is(target error) bool { return target == ErrNotReplicated }

// Unwrap returns the reason WAIT could not run, if any.
func (e *ReplicationError) Unwrap() error { return e.Err }

// replicatedFanOut bounds the shards whose writes wait for replicas at the same time in
// one call on a Cluster (each holds a connection of rueidis's blocking pool while it
// waits).
const replicatedFanOut = 32

// doReplicated runs cmds, each of which writes to the slot of fences[i] (a key of Keys.Fence),
// and waits until Durability.Replicas replicas hold their effects. It returns the
// replies of cmds and, per command, nil or a *ReplicationError.
//
// WAIT counts the replicas that acknowledged the last write of its own connection, so
// each group of commands is sent in one DoMulti followed by a SET of its fence key and
// the WAIT. rueidis sends a DoMulti that holds a blocking command (WAIT is one) in order
// on one connection of its blocking pool, so the shared pipelined connections are never
// held up. The SET makes the WAIT cover every write the primary made before it, also
// when the commands changed nothing (a create of an existing id, a second cancel): Redis
// advances a connection's WAIT offset only on writes it propagates, and a retry that
// finds its change already made must not be confirmed before that change is replicated.
//
// On one server (or Sentinel) the commands go as one group, with one WAIT. On a Cluster,
// a keyless WAIT would go to an arbitrary node, so the commands are grouped by fence key
// (one group per shard: one slot), each group goes on one connection to its slot's master
// (see doOnOneConn), and groups run in parallel, so that a replica that does not answer
// costs Timeout once, not once per shard. On a Cluster a command whose slot moved is
// answered MOVED or ASK (it did not run; its group's WAIT confirms nothing of it), and
// the caller runs it again (see execute).
func (s *Store) doReplicated(ctx context.Context, cmds rueidis.Commands, fences []string) ([]rueidis.RedisResult, []error) {
	res := make([]rueidis.RedisResult, len(cmds))
	errs := make([]error, len(cmds))
	var groups [][]int // indexes into cmds
	if s.c.Mode() == rueidis.ClientModeCluster {
		byFence := map[string]int{}
		for i, f := range fences {
			g, ok := byFence[f]
			if !ok {
				g = len(groups)
				byFence[f] = g
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], i)
		}
	} else {
		all := make([]int, len(cmds))
		for i := range all {
			all[i] = i
		}
		groups = [][]int{all}
	}
	d := s.cfg.Durability
	run := func(idx []int) {
		fence := fences[idx[0]]
		multi := make(rueidis.Commands, 0, len(idx)+2)
		for _, i := range idx {
			multi = append(multi, cmds[i])
		}
		multi = append(multi,
			s.c.B().Set().Key(fence).Value("1").Build(),
			s.c.B().Wait().Numreplicas(int64(d.Replicas)).Timeout(max(d.Timeout.Milliseconds(), 1)).Build().SetSlot(fence))
		r := s.doOnOneConn(ctx, multi)
		err := d.confirmed(r[len(idx)], r[len(idx)+1])
		for k, i := range idx {
			res[i], errs[i] = r[k], err
		}
	}
	if len(groups) == 1 {
		run(groups[0])
		return res, errs
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, replicatedFanOut)
	for _, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(g)
			<-sem
		}()
	}
	wg.Wait()
	return res, errs
}

// doOnOneConn sends multi, whose commands are all of one slot, in order on one
// connection and returns the replies. A single server's (or Sentinel's) DoMulti does so:
// a DoMulti that holds a blocking command (WAIT) goes whole on one connection of rueidis's
// blocking pool. A Cluster's DoMulti does not when the slot moved: it follows each MOVED
// or ASK reply on its own, sending the script and the fence SET to the new master over
// other connections while the keyless WAIT stays on the old master, which then confirms
// writes it never made. On a Cluster multi therefore goes on a dedicated connection to the
// slot's master, which follows no redirection: a MOVED or ASK reply (the command did not
// run) comes back as it is, and the slot map is refreshed for the retry (see execute).
// Like rueidis's own blocking calls, a dedicated connection cut short (context ended,
// connection lost) is closed, not reused: it may still owe the WAIT's reply.
func (s *Store) doOnOneConn(ctx context.Context, multi rueidis.Commands) []rueidis.RedisResult {
	if s.c.Mode() != rueidis.ClientModeCluster {
		return s.c.DoMulti(ctx, multi...)
	}
	var r []rueidis.RedisResult
	_ = s.c.Dedicated(func(dc rueidis.DedicatedClient) error {
		r = dc.DoMulti(ctx, multi...)
		for _, x := range r {
			if x.NonRedisError() != nil {
				dc.Close()
				break
			}
		}
		return nil
	})
	return r
}

// confirmed decodes the replies of a fence SET and its WAIT: nil when enough replicas
// confirmed, else a *ReplicationError.
func (d Durability) confirmed(fence, wait rueidis.RedisResult) error {
	if err := fence.Error(); err != nil {
		return &ReplicationError{Want: d.Replicas, Timeout: d.Timeout, Err: err}
	}
	got, err := wait.AsInt64()
	if err != nil {
		return &ReplicationError{Want: d.Replicas, Timeout: d.Timeout, Err: err}
	}
	if int(got) < d.Replicas {
		return &ReplicationError{Want: d.Replicas, Got: int(got), Timeout: d.Timeout}
	}
	return nil
}
