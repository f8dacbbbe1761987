// Package redistest gives tests the three Redis deployments tock must run on:
//
//   - Miniredis: an in-process github.com/alicebob/miniredis/v2 server, fresh
//     for every call of [Backends], whose clock tests can control
//     (Backend.Mini.SetTime / FastForward);
//   - Server: a real standalone redis-server;
//   - Cluster: a real Redis Cluster of 3 masters (no replicas).
//
// The real servers are started lazily, once per test binary, the first time
// a test asks for them, on free loopback ports and in a temporary directory,
// without persistence (--save "" --appendonly no). They are shared by every
// test of the binary, so tests must keep their keys under a prefix obtained
// from [Namespace] (which deletes them afterwards; nothing ever flushes a
// whole database). When redis-server (or redis-cli, needed to create the
// cluster) is not on PATH, only the miniredis backend is returned and the
// test logs why — unless TOCK_REQUIRE_REDIS=1 is set, in which case the test
// fails. CI sets it, so real-Redis coverage cannot silently disappear.
//
// A package using the helpers must route its TestMain through [Main], which
// stops the servers after the tests and checks for leaked goroutines:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		redistest.Run(t, func(t *testing.T, b redistest.Backend) {
//			t.Parallel()
//			c := b.Client(t)
//			ns := redistest.Namespace(t, b)
//			// use keys ns+":..." (or ns+":{tag}..." for multi-key commands)
//		})
//	}
//
// The server processes are started with Pdeathsig=SIGKILL on Linux, so they
// die with the test binary even when it is killed (e.g. by go test's
// -timeout) and Main never gets to stop them. Go never terminates an OS
// thread that is not locked to a goroutine, so the "parent thread died"
// pitfall of Pdeathsig does not apply here (the starting goroutine never
// calls runtime.LockOSThread). Only the temporary directory would then be
// left behind.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// Kind of backend, used as Backend.Name and as the subtest name by [Run].
const (
	Miniredis = "miniredis"
	Server    = "redis"
	Cluster   = "cluster"
)

// RequireEnv is the environment variable that, when set to "1", makes a
// missing redis-server a test failure instead of a logged skip.
const RequireEnv = "TOCK_REQUIRE_REDIS"

// Timeouts of the real-server startup.
const (
	serverReadyTimeout  = 10 * time.Second
	clusterReadyTimeout = 20 * time.Second
	pollTick            = 25 * time.Millisecond
	startAttempts       = 3 // retries when a probed port got taken meanwhile
)

// Backend is one Redis deployment usable from a test.
type Backend struct {
	Name  string               // Miniredis, Server or Cluster
	Addrs []string             // host:port list (seed nodes for the cluster)
	Mini  *miniredis.Miniredis // set for the miniredis backend only (tests use SetTime/FastForward)
}

// RequireRedis reports whether TOCK_REQUIRE_REDIS=1, i.e. whether the real
// backends are mandatory.
func RequireRedis() bool { return os.Getenv(RequireEnv) == "1" }

// Backends returns the miniredis backend (a fresh miniredis.RunT(t) per
// call) plus, when redis-server is on PATH, the shared real standalone
// server and the shared real 3-master cluster, in that order.
//
// Without redis-server (or redis-cli) on PATH the real backends are skipped
// with a t.Log message, or the test fails if [RequireRedis]. If the real
// servers could not be started, every test calling Backends fails with the
// startup error.
func Backends(t testing.TB) []Backend {
	t.Helper()
	mini := miniredis.RunT(t)
	bs := []Backend{{Name: Miniredis, Addrs: []string{mini.Addr()}, Mini: mini}}

	if err := lookTools(); err != nil {
		if RequireRedis() {
			t.Fatalf("redistest: %v, but %s=1 requires the real Redis backends (%s, %s)", err, RequireEnv, Server, Cluster)
		}
		t.Logf("redistest: %v; skipping the real Redis backends (%s, %s), testing on %s only (set %s=1 to make this an error)",
			err, Server, Cluster, Miniredis, RequireEnv)
		return bs
	}

	st, err := realServers()
	if err != nil {
		t.Fatalf("redistest: starting the real Redis backends: %v", err)
	}
	return append(bs,
		Backend{Name: Server, Addrs: []string{st.server.addr}},
		Backend{Name: Cluster, Addrs: st.clusterAddrs()},
	)
}

// ServerBackend returns the real standalone server of [Backends], for a test or benchmark
// that needs exactly that one; without redis-server it skips t (or fails it, as Backends
// does, when [RequireRedis]).
func ServerBackend(t testing.TB) Backend {
	t.Helper()
	for _, b := range Backends(t) {
		if b.Name == Server {
			return b
		}
	}
	t.Skip("needs redis-server")
	return Backend{}
}

// Run calls fn as a subtest t.Run(b.Name, ...) for every backend of
// [Backends]. Each subtest gets its own Backend value, so fn may call
// t.Parallel(); the miniredis instance stays up until every subtest is done
// (it is closed by the parent test's cleanup). Run does not make the
// subtests parallel itself.
func Run(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) { fn(t, b) })
	}
}

// Client returns a rueidis client for the backend, closed in t.Cleanup.
// Client-side caching is disabled (DisableCache: true) for every backend:
// miniredis has no CLIENT TRACKING and tock does not use caching. Miniredis
// and the standalone server get a plain single-node client
// (ForceSingleClient; miniredis answers CLUSTER SLOTS, which would otherwise
// make rueidis treat it as a one-node cluster). The miniredis client speaks
// RESP2 (AlwaysRESP2) so that subscriptions get their own connection, see
// newClient. For the cluster every seed address is passed and rueidis
// discovers the topology itself.
func (b Backend) Client(t testing.TB) rueidis.Client {
	t.Helper()
	c, err := b.newClient()
	if err != nil {
		t.Fatalf("redistest: rueidis client for %s %v: %v", b.Name, b.Addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// Mini starts a miniredis for t alone (tests that move its clock) and returns it with a
// client set up as Client sets one up for the miniredis backend.
func Mini(t testing.TB) (*miniredis.Miniredis, rueidis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	return m, Backend{Name: Miniredis, Addrs: []string{m.Addr()}, Mini: m}.Client(t)
}

func (b Backend) newClient() (rueidis.Client, error) {
	opt := rueidis.ClientOption{
		InitAddress:  append([]string(nil), b.Addrs...),
		DisableCache: true,
		Dialer:       net.Dialer{Timeout: 5 * time.Second},
	}
	if b.Name != Cluster {
		opt.ForceSingleClient = true
	}
	if b.Name == Miniredis {
		// Over RESP3 rueidis runs SUBSCRIBE (Client.Receive) on the
		// connection shared with every other command, which Redis allows
		// but miniredis refuses ("Can't execute 'eval': only (P)SUBSCRIBE
		// / ... are allowed in this context"). Over RESP2 rueidis uses a
		// dedicated connection for pub/sub.
		opt.AlwaysRESP2 = true
		// miniredis runs a script in a Lua interpreter written in Go, which the race
		// detector slows to seconds for a create of a few thousand jobs: past rueidis's
		// default of 10s the connection is dropped as dead.
		opt.ConnWriteTimeout = time.Minute
	}
	return rueidis.NewClient(opt)
}

// Namespace returns a key prefix unique to the test: "t" followed by 12
// random hex digits (letters and digits only, 13 characters). Keys must be
// named ns+":...". A t.Cleanup deletes every key matching ns+":*" — on the
// cluster by SCANning every master node and UNLINKing the keys one by one
// through the cluster client (they live in different slots). Nothing is
// ever flushed.
func Namespace(t testing.TB, b Backend) string {
	t.Helper()
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("redistest: random namespace: %v", err)
	}
	ns := "t" + hex.EncodeToString(rnd[:])
	t.Cleanup(func() {
		if err := deleteNamespace(b, ns); err != nil {
			t.Errorf("redistest: deleting namespace %q on %s: %v", ns, b.Name, err)
		}
	})
	return ns
}

func deleteNamespace(b Backend, ns string) error {
	pattern := ns + ":*"
	if b.Mini != nil {
		for _, k := range b.Mini.Keys() {
			if strings.HasPrefix(k, ns+":") {
				b.Mini.Del(k)
			}
		}
		return nil
	}
	c, err := b.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for addr, node := range c.Nodes() {
		// Nodes() also lists replicas; scan the masters only (a replica
		// holds the same keys). tock's test cluster has none anyway.
		role, err := node.Do(ctx, node.B().Role().Build()).ToArray()
		if err != nil {
			return fmt.Errorf("ROLE on %s: %w", addr, err)
		}
		if len(role) == 0 {
			return fmt.Errorf("ROLE on %s: empty reply", addr)
		}
		if r, _ := role[0].ToString(); r != "master" {
			continue
		}
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return fmt.Errorf("SCAN on %s: %w", addr, err)
			}
			for _, k := range e.Elements {
				// Through the main client: it routes each key to its slot.
				if err := c.Do(ctx, c.B().Unlink().Key(k).Build()).Error(); err != nil {
					return fmt.Errorf("UNLINK %q: %w", k, err)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// Main wraps testing.M: it runs the tests, stops every redis-server it
// started (SIGKILL, wait, remove the temporary directory) and, when the
// tests passed, checks for leaked goroutines like goleak.VerifyTestMain,
// then exits with the resulting code. Tests still running after 80% of
// -test.timeout are reported as hung (see [startWatchdog]): every goroutine's
// stack, then a digest of the ones in tock's code, and the binary exits 2.
//
// rueidis clients created by [Backend.Client] are closed by t.Cleanup,
// miniredis servers by miniredis.RunT, and the goroutines waiting for the
// redis-server processes end when Main stops them; goleak.Find retries for
// a while, which absorbs rueidis closing connections asynchronously. One
// goroutines of rueidis and two of fasthttp are ignored (see [rueidisRefreshSleeper],
// [rueidisDelayedRefresh], [fasthttpDate]).
func Main(m *testing.M) {
	stopWatchdog := startWatchdog(os.Stderr, os.Exit)
	code := m.Run()
	stopWatchdog()
	if err := stopServers(); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: stopping the Redis servers: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction(rueidisRefreshSleeper), goleak.IgnoreAnyFunction(rueidisDelayedRefresh),
			goleak.IgnoreAnyFunction(fasthttpDate), goleak.IgnoreAnyFunction(fasthttpJanitor)); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// rueidisRefreshSleeper is a rueidis goroutine Main's leak check ignores.
//
// A rueidis cluster client given several seed addresses dials them all at
// once and refreshes the topology as soon as the first dial succeeds; when
// the other seeds' connections land in its connection map during that
// refresh, the refresh keeps them and hands the duplicate connection objects
// it had just created (never dialed) to a goroutine that sleeps 5 seconds
// before closing them (rueidis v1.0.79 cluster.go, _refresh). That goroutine
// outlives Client.Close, so most test binaries using the cluster backend
// would otherwise "leak" it. It is bounded and holds no open connection
// (open connections dropped from the topology would still show up as their
// own pipe goroutines). The name is that of the anonymous function in
// rueidis v1.0.79; re-check it when upgrading rueidis.
const rueidisRefreshSleeper = "github.com/redis/rueidis.(*clusterClient)._refresh.func2"

// rueidisDelayedRefresh is the goroutine of a cluster client's topology refresh that a
// failed or redirected command schedules: it sleeps under a second (rueidis v1.0.79
// singleflight.go, DelayDo, from cluster.go lazyRefresh), then refreshes once, which
// fails fast on a closed client. It outlives Client.Close when the failure came just
// before, as in the failover tests. Bounded, and it holds no connection.
const rueidisDelayedRefresh = "github.com/redis/rueidis.(*call).DelayDo.func1"

// fasthttpDate and fasthttpJanitor are fasthttp (v1.74.0) goroutines that outlive a
// stopped server: the first refreshes the Date header for the whole process and never
// ends; the second, a worker pool's janitor, notices that its server stopped only after
// its next sleep of MaxIdleWorkerDuration (10s by default). Neither holds a connection.
const (
	fasthttpDate    = "github.com/valyala/fasthttp.updateServerDate.func1"
	fasthttpJanitor = "github.com/valyala/fasthttp.(*workerPool).Start.func2"
)

// --- real servers ----------------------------------------------------------

func lookTools() error {
	var missing []string
	for _, name := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s not found on PATH", strings.Join(missing, " and "))
	}
	return nil
}

// state is the set of real servers of this test binary.
type state struct {
	dir     string
	server  *proc
	cluster []*proc
}

func (s *state) clusterAddrs() []string {
	addrs := make([]string, len(s.cluster))
	for i, p := range s.cluster {
		addrs[i] = p.addr
	}
	return addrs
}

var (
	startOnce sync.Once
	started   *state
	startErr  error

	procsMu sync.Mutex
	procs   []*proc  // every process started, for stopServers
	dirs    []string // temporary directories, for stopServers
)

// realServers starts the standalone server and the cluster once; every
// caller gets the same result, including the error.
func realServers() (*state, error) {
	startOnce.Do(func() {
		start := time.Now()
		started, startErr = startAll()
		if startErr == nil && testing.Verbose() {
			fmt.Fprintf(os.Stderr, "redistest: redis-server %s and cluster %v up in %v\n",
				started.server.addr, started.clusterAddrs(), time.Since(start).Round(time.Millisecond))
		}
	})
	return started, startErr
}

func startAll() (*state, error) {
	dir, err := os.MkdirTemp("", "tock-redistest-")
	if err != nil {
		return nil, err
	}
	procsMu.Lock()
	dirs = append(dirs, dir)
	procsMu.Unlock()
	st := &state{dir: dir}

	var errs [2]error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		st.server, errs[0] = retryPorts(func(attempt int) (*proc, error) {
			return startServer(dir, "server", attempt)
		})
	}()
	go func() {
		defer wg.Done()
		_, errs[1] = retryPorts(func(attempt int) (*proc, error) {
			nodes, err := startCluster(dir, attempt)
			st.cluster = nodes
			return nil, err
		})
	}()
	wg.Wait()
	if errs[0] != nil {
		errs[0] = fmt.Errorf("standalone redis-server: %w", errs[0])
	}
	if errs[1] != nil {
		errs[1] = fmt.Errorf("redis cluster: %w", errs[1])
	}
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return st, nil
}

// errPortTaken marks a startup failure caused by a port that was free when
// probed but taken before redis-server bound it (e.g. by a parallel test
// binary); such failures are retried with new ports.
var errPortTaken = errors.New("port already in use")

func retryPorts(start func(attempt int) (*proc, error)) (*proc, error) {
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		var p *proc
		if p, err = start(attempt); err == nil || !errors.Is(err, errPortTaken) {
			return p, err
		}
	}
	return nil, err
}

// startServer starts a standalone redis-server (role names its directory under dir) on a
// free port, with extra arguments, and waits until it answers PING.
func startServer(dir, role string, attempt int, extra ...string) (*proc, error) {
	port, err := freePort(false)
	if err != nil {
		return nil, err
	}
	sub := filepath.Join(dir, fmt.Sprintf("%s-%d-%d", role, port, attempt))
	p, err := startProc(sub, port, extra...)
	if err != nil {
		return nil, err
	}
	if err := p.waitPing(serverReadyTimeout); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

func startCluster(dir string, attempt int) ([]*proc, error) {
	var nodes []*proc
	fail := func(err error) ([]*proc, error) {
		for _, p := range nodes {
			p.kill()
		}
		return nil, err
	}
	taken := map[int]bool{}
	for i := 0; i < 3; i++ {
		port, err := freePort(true, keys(taken)...)
		if err != nil {
			return fail(err)
		}
		taken[port] = true
		sub := filepath.Join(dir, fmt.Sprintf("cluster-%d-%d", port, attempt))
		p, err := startProc(sub, port,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(sub, fmt.Sprintf("nodes-%d.conf", port)),
			"--cluster-node-timeout", "5000",
			// The node would otherwise only learn its own IP from its
			// peers, and report an empty one in CLUSTER SLOTS/SHARDS
			// until then.
			"--cluster-announce-ip", "127.0.0.1",
		)
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, p)
	}
	for _, p := range nodes {
		if err := p.waitPing(serverReadyTimeout); err != nil {
			return fail(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	for _, p := range nodes {
		args = append(args, p.addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("redis-cli %s: %v\n%s%s", strings.Join(args, " "), err, tail(out, 20), nodeLogs(nodes)))
	}
	if err := waitClusterOK(ctx, nodes); err != nil {
		return fail(fmt.Errorf("%v\n--- redis-cli %s ---\n%s%s", err, strings.Join(args, " "), tail(out, 20), nodeLogs(nodes)))
	}
	return nodes, nil
}

// waitClusterOK polls CLUSTER INFO on every node until each one reports
// cluster_state:ok, 16384 assigned slots, 3 known nodes and 3 masters
// serving slots.
func waitClusterOK(ctx context.Context, nodes []*proc) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_known_nodes":    strconv.Itoa(len(nodes)),
		"cluster_size":           strconv.Itoa(len(nodes)),
	}
	tick := time.NewTicker(pollTick)
	defer tick.Stop()
	for {
		var notReady []string
		for _, p := range nodes {
			info, err := rawDo(p.addr, "CLUSTER", "INFO")
			if err != nil {
				notReady = append(notReady, fmt.Sprintf("%s: CLUSTER INFO: %v", p.addr, err))
				continue
			}
			got := parseInfo(info)
			var bad []string
			for _, k := range []string{"cluster_state", "cluster_slots_assigned", "cluster_known_nodes", "cluster_size"} {
				if got[k] != want[k] {
					bad = append(bad, fmt.Sprintf("%s=%q (want %s)", k, got[k], want[k]))
				}
			}
			if len(bad) > 0 {
				notReady = append(notReady, p.addr+": "+strings.Join(bad, ", "))
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready after %v: %s", clusterReadyTimeout, strings.Join(notReady, "; "))
		case <-tick.C:
		}
	}
}

func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// proc is one redis-server process.
type proc struct {
	addr string
	dir  string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait result, valid after done
	once sync.Once
}

func startProc(dir string, port int, extra ...string) (*proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	args := append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "", // log to stdout, i.e. logFile
	}, extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = dir
	cmd.Stdout = logFile // an *os.File: no copying goroutine
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting redis-server: %w", err)
	}
	p := &proc{
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:  dir,
		log:  logPath,
		cmd:  cmd,
		done: make(chan struct{}),
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p, nil
}

// waitPing waits until the server answers PING, failing early if it exits.
func (p *proc) waitPing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		select {
		case <-p.done:
			logTail := p.logTail()
			err := fmt.Errorf("redis-server %s exited during startup (%v)%s", p.addr, p.err, logTail)
			if strings.Contains(logTail, "Address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		default:
		}
		reply, err := rawDo(p.addr, "PING")
		if err == nil && reply == "PONG" {
			// Make sure the answer came from our process and not from a
			// server of a parallel test binary that grabbed the port
			// first (ours is then about to exit with "Address already
			// in use").
			//
			// A server busy starting (loading a dataset, forking for a rewrite) on a
			// loaded machine may not take the next connection within rawDo's second:
			// asked again until the deadline.
			info, ierr := rawDo(p.addr, "INFO", "server")
			if ierr == nil {
				if pid := parseInfo(info)["process_id"]; pid != strconv.Itoa(p.cmd.Process.Pid) {
					return fmt.Errorf("%w: %s is served by process %s, not by our redis-server (pid %d)", errPortTaken, p.addr, pid, p.cmd.Process.Pid)
				}
				return nil
			}
			err = fmt.Errorf("INFO: %w", ierr)
		} else if err == nil {
			err = fmt.Errorf("PING answered %q", reply)
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server %s not ready after %v: %v%s", p.addr, timeout, lastErr, p.logTail())
		}
		time.Sleep(pollTick)
	}
}

// kill stops the process and waits for it; safe to call more than once.
func (p *proc) kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
}

func (p *proc) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("\n(log %s unreadable: %v)", p.log, err)
	}
	return fmt.Sprintf("\n--- tail of %s ---\n%s", p.log, tail(b, 20))
}

func nodeLogs(nodes []*proc) string {
	var sb strings.Builder
	for _, p := range nodes {
		sb.WriteString(p.logTail())
	}
	return sb.String()
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n"))) + "\n"
}

func stopServers() error {
	procsMu.Lock()
	ps, ds := procs, dirs
	procs, dirs = nil, nil
	procsMu.Unlock()
	for _, p := range ps {
		p.kill()
	}
	var errs []error
	for _, d := range ds {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// freePort returns a loopback port that is currently free. Ports are drawn
// below Linux's ephemeral range (32768+), so outgoing connections do not
// take them; for a cluster node (bus) port+10000 must be free too and stay
// below that range. except lists ports already chosen but not bound yet.
func freePort(bus bool, except ...int) (int, error) {
	lo, hi := 20000, 32768 // standalone
	if bus {
		lo, hi = 12000, 22768 // bus port in 22000..32767
	}
	var lastErr error
	for i := 0; i < 100; i++ {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(hi-lo)))
		if err != nil {
			return 0, err
		}
		port := lo + int(n.Int64())
		if contains(except, port) || (bus && contains(except, port+10000)) {
			continue
		}
		if lastErr = probe(port); lastErr != nil {
			continue
		}
		if bus {
			if lastErr = probe(port + 10000); lastErr != nil {
				continue
			}
		}
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port found (last error: %v)", lastErr)
}

func probe(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func keys(m map[int]bool) []int {
	var s []int
	for k := range m {
		s = append(s, k, k+10000)
	}
	return s
}

// rawDo sends one command over a fresh connection and returns a simple
// string, integer or bulk string reply. It is used during startup so that
// readiness polling starts no client goroutines.
func rawDo(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return "", err
	}
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}
