//go:build linux

// Package failtest kills parts of a running tock deployment and counts what that cost:
// runs lost and runs handled twice. It runs on its own Redis Cluster of 3 masters with
// a replica each and AOF on (redistest.StartTopology), with two dispatcher processes
// (the real binary: `tock dispatcher`, given one seed node) and two worker processes
// (this test binary started again as a worker), while a producer creates one-time jobs
// at a steady rate. Each scenario kills one thing with
// SIGKILL halfway through: a dispatcher, a worker, or a Redis master.
//
// Expected: a dispatcher kill loses and doubles nothing (another dispatcher takes the
// shards over when the lease expires; fencing keeps the dead one from firing). A worker
// kill loses nothing; the runs it held come back after their visibility timeout and
// run again on the other worker, so the runs whose handler had started are doubled.
// A master kill with --durability replicas:1 loses no accepted job; runs whose fire,
// claim or ack had not reached the replica can run twice. The same kill with the
// default durability is run too, and what it lost is reported, not asserted.
//
// TestPushFailures (push_test.go) does the same for the push executor on a standalone
// redis-server: a kill -9 of one of two executor processes, and an endpoint that
// answers 500 until the host's breaker opens.
//
// Each scenario logs a line "figures: {...}" (JSON); TOCK_FAILTEST_REPORT=path appends
// them to a file.
package failtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

// Environment of a child process.
const (
	envRole      = "TOCK_FAILTEST_ROLE" // worker, executor, wfworker or wfdispatcher
	envSeeds     = "TOCK_FAILTEST_SEEDS"
	envNamespace = "TOCK_FAILTEST_NAMESPACE"
	envOut       = "TOCK_FAILTEST_OUT" // worker: file of handled runs
	envName      = "TOCK_FAILTEST_NAME"
)

const (
	shards      = 16
	rate        = 250                    // jobs created per second
	produceFor  = 8 * time.Second        // how long the producer runs
	faultAfter  = 3 * time.Second        // when the fault happens, from the producer's start
	dueAfter    = time.Second            // each job is due this long after its creation
	visibility  = 2 * time.Second        // a killed worker's runs come back after about this
	handlerTime = 100 * time.Millisecond // a worker holds about rate*handlerTime/2 runs
	settle      = 45 * time.Second       // how long to wait for the last runs after producing
)

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case "worker":
		os.Exit(child(runWorker))
	case "executor":
		os.Exit(child(runExecutor))
	case "wfworker":
		os.Exit(child(runWorkflowWorker))
	case "wfdispatcher":
		os.Exit(child(runWorkflowDispatcher))
	}
	redistest.Main(m)
}

// child runs a role until SIGTERM and returns the exit code.
func child(role func(ctx context.Context, store *shard.Store, logger *slog.Logger) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: strings.Split(os.Getenv(envSeeds), ","), DisableCache: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer rc.Close()
	// A process that starts while a Redis master fails over cannot open the namespace
	// until a replica has taken the master's slots (on a loaded machine the workers
	// started after the kill): it tries again, as its supervisor would restart it.
	var store *shard.Store
	for start := time.Now(); ; {
		store, err = shard.Open(ctx, rc, shard.Config{Namespace: os.Getenv(envNamespace), Shards: shards})
		if err == nil || ctx.Err() != nil || time.Since(start) > time.Minute {
			break
		}
		fmt.Fprintln(os.Stderr, "open (tried again):", err)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err == nil {
		err = role(ctx, store, logger)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runWorker records every handler start as a line "<job id> <attempt>" in the file
// named by envOut, written with one write(2) each, so a SIGKILL loses none.
func runWorker(ctx context.Context, store *shard.Store, logger *slog.Logger) error {
	f, err := os.OpenFile(os.Getenv(envOut), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := worker.New(worker.Config{Store: store, ID: os.Getenv(envName), Concurrency: 64, Sweep: 500 * time.Millisecond, Logger: logger})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	w.HandleFunc("chaos", func(ctx context.Context, r *worker.Run) error {
		mu.Lock()
		_, err := f.WriteString(r.JobID + " " + strconv.Itoa(r.Attempt) + "\n")
		mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-time.After(handlerTime):
		case <-ctx.Done():
		}
		return nil
	})
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.Stop(sctx)
}

// figures is what a scenario measured.
type figures struct {
	Scenario   string `json:"scenario"`
	Durability string `json:"durability"`
	Created    int    `json:"created"`    // jobs accepted (Create returned no error)
	Refused    int    `json:"refused"`    // jobs whose create still failed after retries
	Retried    int    `json:"retried"`    // creates that failed at first and were sent again
	Handled    int    `json:"handled"`    // handler starts, all attempts
	Lost       int    `json:"lost"`       // accepted jobs never handled
	Duplicated int    `json:"duplicated"` // handler starts beyond the first, per job
	Unknown    int    `json:"unknown"`    // handled jobs the producer never saw accepted
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

type deployment struct {
	t           *testing.T
	tp          *redistest.Topology
	tock        string // the tock binary
	ns          string
	dir         string
	dispatchers []*proc
	workers     []*proc
}

// startWorker starts this test binary as a worker process.
func (d *deployment) startWorker(name string) *proc {
	exe, err := os.Executable()
	require.NoError(d.t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(),
		envRole+"=worker", envName+"="+name,
		envSeeds+"="+strings.Join(d.tp.Seeds(), ","),
		envNamespace+"="+d.ns,
		envOut+"="+filepath.Join(d.dir, name+".runs"),
	)
	return d.start(name, cmd)
}

// startDispatcher runs `tock dispatcher` with one seed node: the client finds the rest
// of the cluster from it.
func (d *deployment) startDispatcher(name string) *proc {
	cmd := exec.Command(d.tock, "dispatcher", "--name", name, "--lease-ttl", "1s", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "TOCK_REDIS="+d.tp.Seeds()[0], "TOCK_NAMESPACE="+d.ns)
	return d.start(name, cmd)
}

func (d *deployment) start(name string, cmd *exec.Cmd) *proc {
	logPath := filepath.Join(d.dir, name+".log")
	logf, err := os.Create(logPath)
	require.NoError(d.t, err)
	defer logf.Close()
	// Registered before the kill below, so run after it: a failed scenario shows what its
	// processes logged (their temporary directory is gone afterwards).
	d.t.Cleanup(func() {
		if !d.t.Failed() {
			return
		}
		b, _ := os.ReadFile(logPath)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		d.t.Logf("%s log (its end):\n%s", name, b)
	})
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(d.t, cmd.Start())
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	d.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

func kill(p *proc) {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (d *deployment) stopAll() {
	for _, p := range append(d.dispatchers, d.workers...) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range append(d.dispatchers, d.workers...) {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// handled reads the workers' files: handler starts per job id.
func (d *deployment) handled() (map[string]int, int) {
	counts := map[string]int{}
	total := 0
	for _, p := range d.workers {
		f, err := os.Open(filepath.Join(d.dir, p.name+".runs"))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(d.t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			id, _, ok := strings.Cut(sc.Text(), " ")
			if ok {
				counts[id]++
				total++
			}
		}
		f.Close()
		require.NoError(d.t, sc.Err())
	}
	return counts, total
}

func TestFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes of a 6-node cluster for a few minutes")
	}
	tp := redistest.StartTopology(t, redistest.TopologyOptions{AOF: true, NodeTimeout: time.Second})
	tock := filepath.Join(t.TempDir(), "tock")
	if out, err := exec.Command("go", "build", "-o", tock, "github.com/tockhq/tock/cmd/tock").CombinedOutput(); err != nil {
		t.Fatalf("go build tock: %v\n%s", err, out)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: tp.Seeds(), DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)

	scenarios := []struct {
		name       string
		durability shard.Durability
		fault      func(d *deployment) error
	}{
		{"kill -9 dispatcher", shard.Durability{}, func(d *deployment) error { kill(d.dispatchers[0]); return nil }},
		{"kill -9 worker", shard.Durability{}, killWorker},
		{"kill -9 redis master", shard.Durability{}, killMaster},
		{"kill -9 redis master", shard.Durability{Replicas: 1, Timeout: 2 * time.Second}, killMaster},
	}
	for i, sc := range scenarios {
		t.Run(sc.name+" "+sc.durability.String(), func(t *testing.T) {
			d := &deployment{t: t, tp: tp, tock: tock, ns: fmt.Sprintf("fail%d%s", i, strconv.FormatInt(time.Now().UnixNano()%1e6, 36)), dir: t.TempDir()}
			store, err := shard.Open(context.Background(), rc, shard.Config{Namespace: d.ns, Shards: shards, Durability: sc.durability})
			require.NoError(t, err)
			for _, n := range []string{"dispatcher-a", "dispatcher-b"} {
				d.dispatchers = append(d.dispatchers, d.startDispatcher(n))
			}
			for _, n := range []string{"worker-a", "worker-b"} {
				d.workers = append(d.workers, d.startWorker(n))
			}
			f := run(t, d, store, sc.fault)
			f.Scenario, f.Durability = sc.name, sc.durability.String()
			report(t, f)
			require.Zero(t, f.Unknown)
			if sc.name != "kill -9 redis master" || sc.durability.Replicas > 0 {
				// Without replicas:N, a master's death can lose the writes of its last
				// moments that had not reached the replica (reported, not asserted).
				require.Zero(t, f.Lost, "accepted jobs never run")
			}
			if sc.name == "kill -9 dispatcher" {
				require.Zero(t, f.Duplicated, "fencing keeps a dead dispatcher's shards from firing twice")
			}
		})
	}
}

// run produces jobs at a steady rate, applies the fault after faultAfter, waits until
// every accepted job ran (or settle passed), stops the processes and counts.
func run(t *testing.T, d *deployment, store *shard.Store, fault func(*deployment) error) figures {
	ctx := context.Background()
	var (
		mu       sync.Mutex
		accepted = map[string]bool{}
		refused  int
		retried  int
		wg       sync.WaitGroup
	)
	start := time.Now()
	faulted := make(chan error, 1)
	go func() {
		time.Sleep(faultAfter)
		faulted <- fault(d)
	}()
	tick := time.NewTicker(time.Second / rate)
	for n := 0; time.Since(start) < produceFor; n++ {
		<-tick.C
		id := fmt.Sprintf("j%06d", n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, attempts := createRetrying(ctx, store, &job.Job{ID: id, Type: "chaos", Visibility: visibility, Retry: job.RetryPolicy{InitialBackoff: 100 * time.Millisecond}, Schedule: job.Schedule{At: time.Now().Add(dueAfter)}})
			mu.Lock()
			defer mu.Unlock()
			if ok {
				accepted[id] = true
			} else {
				refused++
			}
			if attempts > 1 {
				retried++
			}
		}()
	}
	tick.Stop()
	wg.Wait()
	require.NoError(t, <-faulted)

	// Wait until every accepted job ran and no run is left scheduled, ready or in
	// flight (the runs a killed worker held come back after their visibility timeout
	// and run again: those doubles count too).
	deadline := time.Now().Add(settle)
	for {
		counts, _ := d.handled()
		missing := 0
		for id := range accepted {
			if counts[id] == 0 {
				missing++
			}
		}
		if missing == 0 && drained(ctx, store) || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	d.stopAll()

	counts, total := d.handled()
	f := figures{Created: len(accepted), Refused: refused, Retried: retried, Handled: total}
	for id := range accepted {
		if counts[id] == 0 {
			f.Lost++
		}
	}
	for id, c := range counts {
		if !accepted[id] {
			f.Unknown++
		}
		f.Duplicated += c - 1
	}
	return f
}

// drained reports whether no run of the namespace is waiting, ready or in flight.
func drained(ctx context.Context, store *shard.Store) bool {
	qs, err := store.Queues(ctx)
	if err != nil {
		return false
	}
	for _, q := range qs {
		if q.Scheduled+q.Ready+q.InFlight > 0 {
			return false
		}
	}
	return true
}

// createRetrying creates j, retrying with the same id (creates are idempotent by id)
// while the cluster fails over; it reports whether the create was accepted, and after
// how many attempts.
func createRetrying(ctx context.Context, store *shard.Store, j *job.Job) (bool, int) {
	const attempts = 40
	for attempt := 1; attempt <= attempts; attempt++ {
		res, err := store.Create(ctx, []*job.Job{j})
		if err == nil && res[0].Err == nil {
			return true, attempt
		}
		time.Sleep(250 * time.Millisecond)
	}
	return false, attempts
}

// killWorker kills the first worker, which must have started runs by then (so the
// scenario tests something).
func killWorker(d *deployment) error {
	// The victim must hold work when it dies. Under load (-race, a busy machine) it can
	// still be starting, or the other worker's claims can have taken every run so far:
	// wait for its first run, for a while, rather than kill an idle process.
	runs := filepath.Join(d.dir, d.workers[0].name+".runs")
	var b []byte
	var err error
	start := time.Now()
	for ; ; time.Sleep(50 * time.Millisecond) {
		if b, err = os.ReadFile(runs); (err == nil && len(b) > 0) || time.Since(start) > 10*time.Second {
			break
		}
	}
	d.t.Logf("%s killed %v after the fault was due", d.workers[0].name, time.Since(start).Round(time.Millisecond))
	kill(d.workers[0])
	if err != nil || len(b) == 0 {
		return fmt.Errorf("the killed worker had run nothing (%v)", err)
	}
	return nil
}

// killMaster kills the master of a slot with SIGKILL, waits for its replica to take
// over, then restarts it (it rejoins as a replica, so replicas:1 can be met again).
func killMaster(d *deployment) error {
	masters := d.tp.Masters()
	if len(masters) == 0 {
		return errors.New("no master found")
	}
	victim := masters[0]
	victim.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.tp.WaitHealthy(ctx); err != nil {
		return fmt.Errorf("failover after killing %s: %w%s", victim.Addr, err, d.tp.LogTail())
	}
	if err := victim.Restart(); err != nil {
		return err
	}
	if err := d.tp.WaitHealthy(ctx); err != nil {
		return fmt.Errorf("%s rejoining: %w%s", victim.Addr, err, d.tp.LogTail())
	}
	return nil
}

func report(t *testing.T, f figures) {
	b, err := json.Marshal(f)
	require.NoError(t, err)
	t.Logf("figures: %s", b)
	if path := os.Getenv("TOCK_FAILTEST_REPORT"); path != "" {
		out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		require.NoError(t, err)
		defer out.Close()
		_, err = fmt.Fprintf(out, "%s\n", b)
		require.NoError(t, err)
	}
}
