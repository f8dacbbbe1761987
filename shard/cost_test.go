package shard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// BenchmarkRedisCost measures the CPU time the real redis-server spends per run in each
// step of a one-time job's life: create, fire, claim (in batches of claimBatch per shard,
// as a worker's claim round asks each shard) and ack, each claim round acked before the
// next. Redis is tock's bottleneck,
// and its CPU time per run is far steadier than wall-clock rates on a shared machine,
// so this is the figure to compare when changing a script:
//
//	go test ./shard -run '^$' -bench RedisCost -benchtime 20000x
//
// b.N is the number of jobs per round; the figures are Redis µs per run (INFO cpu).
//
// CPU time on a shared machine still varies by ±20% between runs. scripts/redis-cost.sh
// counts instructions instead, which repeat exactly: it runs this benchmark against a
// redis-server under callgrind, named by TOCK_COST_ADDR (instead of the server the shard
// tests start) with its pid in TOCK_COST_CALLGRIND, and the benchmark has callgrind dump
// its counters after each step.
func BenchmarkRedisCost(b *testing.B) {
	ctx := context.Background()
	s, c, dump := costSetup(b)
	const createBatch = 1000
	n := b.N
	body := []byte(strings.Repeat("x", 100))
	b.ResetTimer()

	// Create, due shortly (the scheduled path: due buckets).
	now, err := s.ServerNow(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// Due when every job is created: under callgrind a create takes up to a few
	// milliseconds a job, on a bare server about 20 µs.
	perJob := 50 * time.Microsecond
	if os.Getenv("TOCK_COST_CALLGRIND") != "" {
		perJob = 3 * time.Millisecond
	}
	due := now.Add(2*time.Second + time.Duration(n)*perJob)
	dump("start")
	cpu0 := redisCPU(b, c)
	for i := 0; i < n; i += createBatch {
		var jobs []*job.Job
		for k := i; k < min(n, i+createBatch); k++ {
			jobs = append(jobs, &job.Job{ID: "c" + strconv.Itoa(k), Type: "noop", Payload: body, Schedule: job.Schedule{At: due}})
		}
		res, err := s.Create(ctx, jobs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	cpu1 := redisCPU(b, c)
	dump("create")

	// Fire: every shard's due runs in one call each, under lease.
	time.Sleep(time.Until(due) + 50*time.Millisecond)
	ids := make([]shard.ID, 64)
	for i := range ids {
		ids[i] = shard.ID(i)
	}
	leases := s.AcquireLeases(ctx, "cost", ids, time.Minute)
	dump("idle")
	cpu2 := redisCPU(b, c)
	fired := 0
	for _, l := range leases {
		if !l.Held {
			b.Fatalf("lease of shard %d: %v", l.Lease.Shard, l.Err)
		}
		for {
			d, err := s.FireDue(ctx, l.Lease, 10000, 0)
			if err != nil {
				b.Fatal(err)
			}
			fired += d.Fired
			if d.Fired == 0 {
				break
			}
		}
	}
	cpu3 := redisCPU(b, c)
	dump("fire")
	if fired != n {
		b.Fatalf("fired %d of %d", fired, n)
	}

	// Claims and acks alternate, a round of each at a time, as under a worker.
	claimCPU, ackCPU := claimAndAck(b, s, c, ids, n, dump, "claim", "ack")
	// The fixed cost of a call that finds nothing to do, as most calls at a steady 20,000
	// fires/s carry only a few runs: fire on a shard with nothing due, claim from an
	// empty queue, ack nothing. Each repeated `calls` times, 64 calls per pipeline.
	const calls = 6400
	empty := func(do func() error) float64 {
		start := redisCPU(b, c)
		for i := 0; i < calls; i += len(ids) {
			if err := do(); err != nil {
				b.Fatal(err)
			}
		}
		return float64((redisCPU(b, c) - start).Microseconds()) / calls
	}
	fireFixed := empty(func() error {
		for _, l := range leases {
			if _, err := s.FireDue(ctx, l.Lease, 1000, 0); err != nil {
				return err
			}
		}
		return nil
	})
	dump("fire-empty")
	claimFixed := empty(func() error {
		reqs := make([]shard.ClaimRequest, len(ids))
		for i, id := range ids {
			reqs[i] = shard.ClaimRequest{Shard: id, Queue: "default", N: claimBatch}
		}
		for _, r := range s.ClaimMany(ctx, reqs, "cost", "n1") {
			if r.Err != nil || len(r.Runs) > 0 {
				return fmt.Errorf("empty claim: %v, %d runs", r.Err, len(r.Runs))
			}
		}
		return nil
	})
	dump("claim-empty")
	b.StopTimer()
	b.ReportMetric(fireFixed, "fire-µs/empty-call")
	b.ReportMetric(claimFixed, "claim-µs/empty-call")
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	b.ReportMetric(per(cpu1-cpu0), "create-µs/run")
	b.ReportMetric(per(cpu3-cpu2), "fire-µs/run")
	b.ReportMetric(per(claimCPU), "claim-µs/run")
	b.ReportMetric(per(ackCPU), "ack-µs/run")
	b.ReportMetric(per(cpu1-cpu0+cpu3-cpu2+claimCPU+ackCPU), "total-µs/run")
}

// redisCPU is the redis-server's CPU time so far (user + system).
func redisCPU(b *testing.B, c rueidis.Client) time.Duration {
	b.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(fmt.Errorf("INFO cpu %s: %w", k, err))
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkRedisCostChains is BenchmarkRedisCost for workflow nodes: b.N three-node chain
// workflows (a → b → c, as `tock bench workflow`'s chains) are created, and then their
// nodes are claimed and acked in rounds until all have run, each ack releasing the next
// node of its chain in the same call. scripts/redis-cost.sh counts its instructions per
// chain created and per node claimed and acked (callgrind dumps "chain-start",
// "chain-create", "chain-claim" and "chain-ack").
func BenchmarkRedisCostChains(b *testing.B) {
	ctx := context.Background()
	s, c, dump := costSetup(b)
	n := b.N
	b.ResetTimer()
	dump("chain-start")
	cpu0 := redisCPU(b, c)
	for i := range n {
		w := &job.Workflow{ID: "w" + strconv.Itoa(i), Jobs: []job.Node{
			{Job: job.Job{ID: "a", Type: "noop"}},
			{Job: job.Job{ID: "b", Type: "noop"}, DependsOn: []string{"a"}},
			{Job: job.Job{ID: "c", Type: "noop"}, DependsOn: []string{"b"}},
		}}
		if _, err := s.CreateWorkflow(ctx, w); err != nil {
			b.Fatal(err)
		}
	}
	cpu1 := redisCPU(b, c)
	dump("chain-create")

	ids := make([]shard.ID, 64)
	for i := range ids {
		ids[i] = shard.ID(i)
	}
	claimCPU, ackCPU := claimAndAck(b, s, c, ids, 3*n, dump, "chain-claim", "chain-ack")
	b.StopTimer()
	w, err := s.Workflow(ctx, "w0")
	if err != nil || w.State != job.WorkflowSucceeded {
		b.Fatalf("chain w0: %v, %v", w, err)
	}
	nodes := float64(3 * n)
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(n), "create-µs/chain")
	b.ReportMetric(float64(claimCPU.Microseconds())/nodes, "claim-µs/node")
	b.ReportMetric(float64(ackCPU.Microseconds())/nodes, "ack-µs/node")
}

// claimBatch is the runs a cost benchmark's claim asks each shard for, as a worker's
// claim round does.
const claimBatch = 64

// costSetup opens a store of 64 shards on the server of TOCK_COST_ADDR (else one the
// tests start), and returns it, its client and dump, which has callgrind (the pid in
// TOCK_COST_CALLGRIND, when set) dump its counters as the step it names.
func costSetup(b *testing.B) (*shard.Store, rueidis.Client, func(step string)) {
	backend := redistest.Backend{Name: redistest.Server, Addrs: []string{os.Getenv("TOCK_COST_ADDR")}}
	if backend.Addrs[0] == "" {
		backend = redistest.ServerBackend(b)
	}
	dump := func(step string) {
		if pid := os.Getenv("TOCK_COST_CALLGRIND"); pid != "" {
			if out, err := exec.Command("callgrind_control", "--dump="+step, pid).CombinedOutput(); err != nil {
				b.Fatalf("callgrind_control --dump=%s %s: %v: %s", step, pid, err, out)
			}
		}
	}
	c := backend.Client(b)
	s, err := shard.Open(context.Background(), c, shard.Config{Namespace: redistest.Namespace(b, backend), Shards: 64})
	if err != nil {
		b.Fatal(err)
	}
	return s, c, dump
}

// claimAndAck claims and acks n runs of the shards ids in rounds, as under a worker: a
// claim of up to claimBatch runs from every shard, then an ack of all of them (in-flight
// sets stay as small as a worker's claims keep them). It returns the Redis CPU time of
// the claims and of the acks; each round dumps its own callgrind parts, claimStep and
// ackStep (redis-cost.sh adds them up).
func claimAndAck(b *testing.B, s *shard.Store, c rueidis.Client, ids []shard.ID, n int, dump func(string), claimStep, ackStep string) (claimCPU, ackCPU time.Duration) {
	ctx := context.Background()
	for got := 0; got < n; {
		reqs := make([]shard.ClaimRequest, len(ids))
		for i, id := range ids {
			reqs[i] = shard.ClaimRequest{Shard: id, Queue: "default", N: claimBatch}
		}
		t0 := redisCPU(b, c)
		var claimed []shard.ClaimResult
		round := 0
		for _, r := range s.ClaimMany(ctx, reqs, "cost", "n1") {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			if len(r.Runs) > 0 {
				claimed = append(claimed, r)
				round += len(r.Runs)
			}
		}
		t1 := redisCPU(b, c)
		dump(claimStep)
		if round == 0 {
			b.Fatalf("claimed %d of %d", got, n)
		}
		got += round
		for _, r := range claimed {
			fs := make([]shard.Finish, len(r.Runs))
			for i, run := range r.Runs {
				fs[i] = shard.Finish{Member: run.Member, Token: run.Token, Outcome: shard.Succeeded}
			}
			errs, err := s.FinishRuns(ctx, r.Runs[0].Shard, fs)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range errs {
				if e != nil {
					b.Fatal(e)
				}
			}
		}
		t2 := redisCPU(b, c)
		dump(ackStep)
		claimCPU += t1 - t0
		ackCPU += t2 - t1
	}
	return claimCPU, ackCPU
}
