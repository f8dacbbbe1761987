package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestBackends(t *testing.T) {
	names := map[string]bool{}
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		names[b.Name] = true // Run's subtests are sequential unless fn calls t.Parallel
		t.Parallel()
		ctx := context.Background()
		c := b.Client(t)
		ns := redistest.Namespace(t, b)
		if !regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`).MatchString(ns) {
			t.Fatalf("namespace %q: want a letter then letters/digits, max 16 chars", ns)
		}
		if (b.Mini != nil) != (b.Name == redistest.Miniredis) {
			t.Fatalf("%s: Mini set = %v", b.Name, b.Mini != nil)
		}

		key := ns + ":hello"
		if err := c.Do(ctx, c.B().Set().Key(key).Value("world").Build()).Error(); err != nil {
			t.Fatalf("SET: %v", err)
		}
		got, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
		if err != nil || got != "world" {
			t.Fatalf("GET = %q, %v; want world", got, err)
		}

		switch b.Name {
		case redistest.Cluster:
			if len(b.Addrs) != 3 {
				t.Errorf("cluster seed addresses = %v, want 3", b.Addrs)
			}
			if m := c.Mode(); m != rueidis.ClientModeCluster {
				t.Errorf("client mode = %v, want cluster", m)
			}
			nodes := c.Nodes()
			if len(nodes) != 3 {
				t.Errorf("rueidis sees %d nodes, want 3: %v", len(nodes), keysOf(nodes))
			}
			for addr, node := range nodes {
				if n := countMasters(t, node); n != 3 {
					t.Errorf("CLUSTER SHARDS on %s: %d masters serving slots, want 3", addr, n)
				}
			}
		default:
			if m := c.Mode(); m != rueidis.ClientModeStandalone {
				t.Errorf("client mode = %v, want standalone", m)
			}
		}
	})
	if !names[redistest.Miniredis] {
		t.Error("no miniredis backend")
	}
	if redistest.RequireRedis() && (!names[redistest.Server] || !names[redistest.Cluster]) {
		t.Errorf("TOCK_REQUIRE_REDIS=1 but backends = %v", names)
	}
}

// countMasters counts the masters of the shards that own slots, as seen by
// one node.
func countMasters(t *testing.T, node rueidis.Client) int {
	t.Helper()
	shards, err := node.Do(context.Background(), node.B().ClusterShards().Build()).ToArray()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	masters := 0
	for _, sh := range shards {
		m, err := sh.AsMap()
		if err != nil {
			t.Fatalf("shard: %v", err)
		}
		slotsMsg := m["slots"]
		slots, _ := slotsMsg.ToArray()
		nodesMsg := m["nodes"]
		nodes, err := nodesMsg.ToArray()
		if err != nil {
			t.Fatalf("shard nodes: %v", err)
		}
		for _, n := range nodes {
			nm, err := n.AsMap()
			if err != nil {
				t.Fatalf("shard node: %v", err)
			}
			roleMsg := nm["role"]
			if role, _ := roleMsg.ToString(); role == "master" && len(slots) > 0 {
				masters++
			}
		}
	}
	return masters
}

func TestCrossSlotKeysAndCleanup(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		c := b.Client(t)

		// A second namespace that outlives the first one: its cleanup
		// must not touch it.
		keep := redistest.Namespace(t, b)
		if err := c.Do(ctx, c.B().Set().Key(keep+":k").Value("v").Build()).Error(); err != nil {
			t.Fatalf("SET: %v", err)
		}

		const n = 64
		var ns string
		t.Run("write", func(t *testing.T) {
			ns = redistest.Namespace(t, b)
			if ns == keep {
				t.Fatalf("two namespaces are equal: %q", ns)
			}
			// One command per key: they are in different slots.
			for i := range n {
				k := fmt.Sprintf("%s:key-%d", ns, i)
				if err := c.Do(ctx, c.B().Set().Key(k).Value(k).Build()).Error(); err != nil {
					t.Fatalf("SET %s: %v", k, err)
				}
			}
			// A pipeline of single-key commands across slots is split
			// by rueidis per node.
			cmds := make(rueidis.Commands, 0, n)
			for i := range n {
				cmds = append(cmds, c.B().Get().Key(fmt.Sprintf("%s:key-%d", ns, i)).Build())
			}
			for i, r := range c.DoMulti(ctx, cmds...) {
				want := fmt.Sprintf("%s:key-%d", ns, i)
				if got, err := r.ToString(); err != nil || got != want {
					t.Fatalf("GET %s = %q, %v", want, got, err)
				}
			}
			if b.Name != redistest.Cluster {
				return
			}
			slots := map[int64]bool{}
			for i := range n {
				s, err := c.Do(ctx, c.B().ClusterKeyslot().Key(fmt.Sprintf("%s:key-%d", ns, i)).Build()).AsInt64()
				if err != nil {
					t.Fatalf("CLUSTER KEYSLOT: %v", err)
				}
				slots[s] = true
			}
			if len(slots) < 2 {
				t.Fatalf("all %d keys in one slot", n)
			}
			// The keys must be spread over every master (probability of a
			// master getting none of 64 random keys: ~1e-11).
			total := 0
			for addr, node := range c.Nodes() {
				k := scanAll(t, node, ns+":*")
				if len(k) == 0 {
					t.Errorf("no key of the namespace on %s", addr)
				}
				total += len(k)
			}
			if total != n {
				t.Errorf("found %d keys over the nodes, want %d", total, n)
			}
		})
		if ns == "" {
			t.Fatal("subtest did not run")
		}

		// The subtest's cleanup has deleted its namespace...
		for i := range n {
			k := fmt.Sprintf("%s:key-%d", ns, i)
			if e, err := c.Do(ctx, c.B().Exists().Key(k).Build()).AsInt64(); err != nil || e != 0 {
				t.Fatalf("EXISTS %s after cleanup = %d, %v", k, e, err)
			}
		}
		for addr, node := range c.Nodes() {
			if k := scanAll(t, node, ns+":*"); len(k) > 0 {
				t.Errorf("%s still has %v after cleanup", addr, k)
			}
		}
		// ... and only it.
		if got, err := c.Do(ctx, c.B().Get().Key(keep+":k").Build()).ToString(); err != nil || got != "v" {
			t.Fatalf("other namespace's key = %q, %v; want v", got, err)
		}
	})
}

func scanAll(t *testing.T, node rueidis.Client, match string) []string {
	t.Helper()
	var keys []string
	var cursor uint64
	for {
		e, err := node.Do(context.Background(), node.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return keys
		}
	}
}

func keysOf[V any](m map[string]V) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	return s
}

// TestPubSubAlongsideCommands checks that a client can stay subscribed
// (Receive) while the same client runs other commands, on every backend
// (miniredis refuses commands on a subscribed connection, which rueidis
// shares with other commands over RESP3).
func TestPubSubAlongsideCommands(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		c := b.Client(t)
		ns := redistest.Namespace(t, b)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		got := make(chan string, 100)
		done := make(chan error, 1)
		go func() {
			done <- c.Receive(ctx, c.B().Subscribe().Channel(ns+":ch").Build(), func(m rueidis.PubSubMessage) {
				select {
				case got <- m.Message:
				default:
				}
			})
		}()

		deadline := time.After(10 * time.Second)
		for i := 0; ; i++ {
			// Commands on the same client while it is subscribed.
			k := fmt.Sprintf("%s:k%d", ns, i)
			if err := c.Do(ctx, c.B().Set().Key(k).Value("v").Build()).Error(); err != nil {
				t.Fatalf("SET while subscribed: %v", err)
			}
			if err := c.Do(ctx, c.B().Eval().Script("return redis.call('GET', KEYS[1])").Numkeys(1).Key(k).Build()).Error(); err != nil {
				t.Fatalf("EVAL while subscribed: %v", err)
			}
			if err := c.Do(ctx, c.B().Publish().Channel(ns+":ch").Message("hi").Build()).Error(); err != nil {
				t.Fatalf("PUBLISH: %v", err)
			}
			select {
			case m := <-got:
				if m != "hi" {
					t.Fatalf("message = %q", m)
				}
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("Receive: %v", err)
				}
				return
			case err := <-done:
				t.Fatalf("Receive returned early: %v", err)
			case <-deadline:
				t.Fatal("no message received")
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
}
