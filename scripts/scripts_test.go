package scripts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	nodes = 6
	// requireEnv set to 1 turns a missing redis-server into a failure (as in
	// internal/redistest; CI sets it).
	requireEnv = "TOCK_REQUIRE_REDIS"
	// exitPortsTaken is redis-cluster.sh's exit status when a port is taken.
	exitPortsTaken = 3
)

// result is one run of redis-cluster.sh.
type result struct {
	out, errOut string
	code        int
}

// script runs redis-cluster.sh with args.
func script(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // also runs in Cleanup, after t.Context ends
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{"redis-cluster.sh"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{out: out.String(), errOut: errOut.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("redis-cluster.sh %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// redisCLI runs redis-cli against 127.0.0.1:port, with stdin when given, and returns
// its trimmed output.
func redisCLI(t *testing.T, port int, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "--raw"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "redis-cli -p %d %s: %s", port, strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

func requireRedis(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv(requireEnv) == "1" {
				t.Fatalf("%s is not on PATH, and %s=1 requires it", bin, requireEnv)
			}
			t.Skipf("%s is not on PATH (install redis-server; %s=1 makes this a failure)", bin, requireEnv)
		}
	}
}

// freeBase returns a base port whose 6 node ports and 6 bus ports (+10000) are free.
// The bus ports stay below 32768, where Linux starts handing out ports to outgoing
// connections.
func freeBase(t *testing.T) int {
	t.Helper()
	for range 200 {
		n, err := rand.Int(rand.Reader, big.NewInt(22760-12000))
		require.NoError(t, err)
		base := 12000 + int(n.Int64())
		if portsFree(base) {
			return base
		}
	}
	t.Fatal("no 6 free loopback ports with free bus ports found")
	return 0
}

func portsFree(base int) bool {
	for i := range nodes {
		for _, p := range []int{base + i, base + i + 10000} {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				return false
			}
			l.Close()
		}
	}
	return true
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string
	port             int
	isMaster         bool
	slots            [][2]int
}

func clusterNodes(t *testing.T, port int) []clusterNode {
	t.Helper()
	var ns []clusterNode
	for _, line := range strings.Split(redisCLI(t, port, "", "CLUSTER", "NODES"), "\n") {
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 8, "CLUSTER NODES line %q", line)
		addr, _, _ := strings.Cut(f[1], "@")
		_, ps, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		p, err := strconv.Atoi(ps)
		require.NoError(t, err)
		n := clusterNode{id: f[0], addr: addr, port: p, master: f[3]}
		for _, flag := range strings.Split(f[2], ",") {
			require.NotContains(t, []string{"fail", "fail?", "handshake", "noaddr"}, flag, "node %s", addr)
			if flag == "master" {
				n.isMaster = true
			}
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			require.NoError(t, errors.Join(err1, err2), "slot range %q", r)
			n.slots = append(n.slots, [2]int{a, b})
		}
		ns = append(ns, n)
	}
	return ns
}

func TestRedisCluster(t *testing.T) {
	requireRedis(t)
	// A space in the path: redis.conf must quote it.
	dir := filepath.Join(t.TempDir(), "tock cluster")

	var base int
	var up result
	for attempt := 0; ; attempt++ {
		base = freeBase(t)
		up = script(t, "up", "--base-port", strconv.Itoa(base), "--dir", dir, "--timeout", "45")
		// A port taken between the probe and the start (another test binary) is retried.
		if up.code != exitPortsTaken || attempt == 2 {
			break
		}
		t.Logf("ports raced, retrying: %s", up.errOut)
	}
	b := strconv.Itoa(base)
	t.Cleanup(func() {
		if r := script(t, "down", "--base-port", b, "--dir", dir); r.code != 0 {
			t.Errorf("cleanup: down: exit %d: %s", r.code, r.errOut)
		}
	})
	require.Equal(t, 0, up.code, "up: %s", up.errOut)
	var seeds []string
	for i := range nodes {
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", base+i))
	}
	require.Equal(t, strings.Join(seeds, ",")+"\n", up.out, "up prints the seed addresses alone on stdout")

	t.Run("Topology", func(t *testing.T) {
		ns := clusterNodes(t, base)
		require.Len(t, ns, nodes)
		masters := map[string]clusterNode{}
		covered := 0
		for _, n := range ns {
			require.True(t, n.port >= base && n.port < base+nodes, "node %s", n.addr)
			if n.isMaster {
				masters[n.id] = n
				for _, r := range n.slots {
					covered += r[1] - r[0] + 1
				}
			}
		}
		require.Len(t, masters, 3)
		require.Equal(t, 16384, covered, "the masters serve every slot")
		replicated := map[string]bool{}
		for _, n := range ns {
			if n.isMaster {
				continue
			}
			require.Contains(t, masters, n.master, "replica %s follows a master", n.addr)
			require.False(t, replicated[n.master], "master %s has one replica", masters[n.master].addr)
			replicated[n.master] = true
		}
		require.Len(t, replicated, 3, "3 replicas, one per master")
	})

	t.Run("Config", func(t *testing.T) {
		for i := range nodes {
			got := redisCLI(t, base+i, "", "CONFIG", "GET", "*")
			f := strings.Split(got, "\n")
			conf := map[string]string{}
			for j := 0; j+1 < len(f); j += 2 {
				conf[f[j]] = f[j+1]
			}
			require.Equal(t, "yes", conf["appendonly"], "node %d", base+i)
			require.Equal(t, "everysec", conf["appendfsync"], "node %d", base+i)
			require.Equal(t, "yes", conf["cluster-enabled"], "node %d", base+i)
			require.Equal(t, "yes", conf["daemonize"], "node %d", base+i)
			require.Equal(t, filepath.Join(dir, strconv.Itoa(base+i)), conf["dir"], "each node has its own data directory")
		}
	})

	t.Run("ReplicaReadsWrite", func(t *testing.T) {
		const key, val = "tock:scripts-test", "written-on-the-master"
		slot, err := strconv.Atoi(redisCLI(t, base, "", "CLUSTER", "KEYSLOT", key))
		require.NoError(t, err)
		var master, replica clusterNode
		ns := clusterNodes(t, base)
		for _, n := range ns {
			for _, r := range n.slots {
				if n.isMaster && slot >= r[0] && slot <= r[1] {
					master = n
				}
			}
		}
		require.NotEmpty(t, master.id, "a master serves slot %d", slot)
		for _, n := range ns {
			if n.master == master.id {
				replica = n
			}
		}
		require.NotEmpty(t, replica.id, "master %s has a replica", master.addr)
		// SET then WAIT on one connection: the reply of WAIT is how many replicas have it.
		require.Equal(t, "OK\n1", redisCLI(t, master.port, "SET "+key+" "+val+"\nWAIT 1 5000\n"))
		require.Equal(t, "OK\n"+val, redisCLI(t, replica.port, "READONLY\nGET "+key+"\n"))
		require.Equal(t, "1", redisCLI(t, master.port, "", "DEL", key))
	})

	t.Run("UpAgain", func(t *testing.T) {
		again := script(t, "up", "--base-port", b, "--dir", dir)
		require.Equal(t, 0, again.code, "up is idempotent: %s", again.errOut)
		require.Equal(t, up.out, again.out)
		require.NotContains(t, again.errOut, "forming", "a formed cluster is not formed again")
	})

	t.Run("Status", func(t *testing.T) {
		st := script(t, "status", "--base-port", b, "--dir", dir)
		require.Equal(t, 0, st.code, "status: %s%s", st.out, st.errOut)
		require.Equal(t, 3, strings.Count(st.out, " master "), st.out)
		require.Equal(t, 3, strings.Count(st.out, " replica "), st.out)
		require.Contains(t, st.out, "cluster healthy")
	})

	t.Run("RefusesTakenPorts", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "other")
		r := script(t, "up", "--base-port", b, "--dir", other)
		require.Equal(t, exitPortsTaken, r.code, "stdout: %s\nstderr: %s", r.out, r.errOut)
		require.Contains(t, r.errOut, "ports already in use")
		require.Contains(t, r.errOut, b, "the message names the ports")
		require.Empty(t, r.out)
		require.Equal(t, 0, script(t, "down", "--base-port", b, "--dir", other).code)
	})

	t.Run("Usage", func(t *testing.T) {
		require.Equal(t, 2, script(t, "restart").code)
		require.Equal(t, 2, script(t, "up", "--base-port", "80").code)
		require.Equal(t, 2, script(t, "up", "--bogus").code)
		require.Equal(t, 2, script(t, "up", "--dir").code, "a flag without its value")
		h := script(t, "--help")
		require.Equal(t, 0, h.code)
		require.Contains(t, h.out, "up|down|status")
	})

	down := script(t, "down", "--base-port", b, "--dir", dir)
	require.Equal(t, 0, down.code, "down: %s", down.errOut)
	require.NoDirExists(t, dir)
	require.Eventually(t, func() bool { return portsFree(base) }, 10*time.Second, 50*time.Millisecond, "down frees the ports")
	require.Equal(t, 0, script(t, "down", "--base-port", b, "--dir", dir).code, "down is idempotent")
	require.Equal(t, 1, script(t, "status", "--base-port", b, "--dir", dir).code, "status of a stopped cluster")
}

// TestRedisCost runs redis-cost.sh small and checks that it reports a count for every
// step. It needs valgrind besides redis-server.
func TestRedisCost(t *testing.T) {
	requireRedis(t)
	for _, bin := range []string{"valgrind", "callgrind_control", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not on PATH", bin)
		}
	}
	run := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", append([]string{"redis-cost.sh"}, args...)...)
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return errOut.String(), ee.ExitCode()
		}
		require.NoError(t, err, "redis-cost.sh %s: %s", strings.Join(args, " "), errOut.String())
		return string(out), 0
	}

	for _, args := range [][]string{{"lots"}, {"128", "0"}, {"128", "8", "1"}} {
		msg, code := run(args...)
		require.Equal(t, 2, code, msg)
		require.Contains(t, msg, "usage")
	}

	out, code := run("128", "16")
	require.Equal(t, 0, code, out)
	var got struct {
		Jobs     int
		PerRun   map[string]float64 `json:"instructions_per_run"`
		PerEmp   map[string]float64 `json:"instructions_per_empty_call"`
		Chains   int
		PerChain map[string]float64 `json:"instructions_per_chain"`
		PerNode  map[string]float64 `json:"instructions_per_node"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, 128, got.Jobs)
	require.Equal(t, 16, got.Chains)
	require.Greater(t, got.PerChain["create"], 5000.0, out)
	for _, step := range []string{"claim", "ack"} {
		require.Greater(t, got.PerNode[step], 5000.0, "node %s: %s", step, out)
	}
	// A script call alone takes thousands of instructions: a smaller count means a step
	// was not measured.
	for _, step := range []string{"create", "fire", "claim", "ack"} {
		require.Greater(t, got.PerRun[step], 5000.0, "%s: %s", step, out)
	}
	for _, step := range []string{"fire", "claim"} {
		require.Greater(t, got.PerEmp[step], 5000.0, "empty %s: %s", step, out)
	}
}
