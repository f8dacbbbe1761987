package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// BareConfig configures the bare scenario.
type BareConfig struct {
	Common
	Jobs int
	// Batch is the jobs each step moves in one command or script call. Default
	// DefaultBareBatch.
	Batch int
	// Streams run the pipeline side by side, each on its own keys (one hash tag each,
	// so on a Cluster they spread over the masters). Default DefaultBareStreams.
	Streams int
	// Payload bytes are carried in each job's member.
	Payload int
}

// Defaults of the bare scenario: a batch within the 100-1,000 that bare Redis pipelines
// are quoted with, and enough streams to keep one Redis busy while each waits for its
// round trips.
const (
	DefaultBareBatch   = 500
	DefaultBareStreams = 8
)

// BareResult is what the bare scenario prints.
type BareResult struct {
	Scenario         string  `json:"scenario"`
	Backend          string  `json:"backend"`
	Jobs             int     `json:"jobs"`
	Processed        int     `json:"processed"`
	Duplicates       int     `json:"duplicates"`
	JobsPerSec       float64 `json:"jobs_per_sec"`
	RedisCPUUsPerJob float64 `json:"redis_cpu_us_per_job"`
	Batch            int     `json:"batch"`
	Streams          int     `json:"streams"`
	Payload          int     `json:"payload"`
	// Procs is the GOMAXPROCS the scenario ran with (tock bench's --procs).
	Procs int `json:"procs"`
}

// The bare pipeline's scripts. Promote moves up to ARGV[2] members due by ARGV[1] (ms)
// from the due set to the ready set; claim moves up to ARGV[2] ready members to the
// in-flight set with the deadline ARGV[1] and returns them. Nothing else: no job record,
// no state, no token, no counts.
var (
	barePromote = rueidis.NewLuaScript(`
local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', '0', ARGV[2])
if #m == 0 then
  return 0
end
local members, adds = {}, {}
for i = 1, #m, 2 do
  members[#members + 1] = m[i]
  adds[#adds + 1] = m[i + 1]
  adds[#adds + 1] = m[i]
end
redis.call('ZREM', KEYS[1], unpack(members))
redis.call('ZADD', KEYS[2], unpack(adds))
return #members
`)
	bareClaim = rueidis.NewLuaScript(`
local m = redis.call('ZRANGE', KEYS[1], '0', tonumber(ARGV[2]) - 1)
if #m == 0 then
  return m
end
redis.call('ZREMRANGEBYRANK', KEYS[1], '0', #m - 1)
local adds = {}
for i = 1, #m do
  adds[#adds + 1] = ARGV[1]
  adds[#adds + 1] = m[i]
end
redis.call('ZADD', KEYS[2], unpack(adds))
return m
`)
)

// Bare runs the floor tock is measured against: the least a Redis job pipeline does per
// job, on the same Redis and machine as the other scenarios. Each stream takes its share
// of the jobs in batches: ZADD to a due set (due now), a Lua promote to a ready set, a
// Lua claim to an in-flight set, and ZREM from it (the ack); one round trip per step. It
// does not use tock's store, workers or dispatchers.
func Bare(ctx context.Context, cfg BareConfig) (*BareResult, error) {
	if cfg.Jobs < 1 {
		return nil, errors.New("bench bare: --jobs must be positive")
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBareBatch
	}
	if cfg.Streams == 0 {
		cfg.Streams = DefaultBareStreams
	}
	if cfg.Batch < 1 || cfg.Streams < 1 || cfg.Payload < 0 {
		return nil, fmt.Errorf("bench bare: --batch %d, --concurrency %d and --payload %d: want positive batch and streams, payload ≥ 0", cfg.Batch, cfg.Streams, cfg.Payload)
	}
	cfg.Dispatchers = 0
	e, err := connect(ctx, cfg.Common, false)
	if err != nil {
		return nil, err
	}
	defer e.close(ctx)
	res := &BareResult{Scenario: "bare", Backend: e.backend, Jobs: cfg.Jobs, Batch: cfg.Batch, Streams: cfg.Streams, Payload: cfg.Payload,
		Procs: runtime.GOMAXPROCS(0)}
	body := string(payload(cfg.Payload))

	var mu sync.Mutex
	seen := make(map[string]int, cfg.Jobs)
	var processed atomic.Int64
	p := newProgress(cfg.Progress, "processed", cfg.Jobs)
	cpu := e.meterCPU(ctx)
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	for s := 0; s < cfg.Streams; s++ {
		share := cfg.Jobs / cfg.Streams
		if s < cfg.Jobs%cfg.Streams {
			share++
		}
		keys := bareKeys(e.ns, s)
		wg.Go(func() {
			for done := 0; done < share; {
				n := min(cfg.Batch, share-done)
				claimed, err := bareBatch(ctx, e.rc, keys, s, done, n, body)
				if err != nil {
					errOnce.Do(func() {
						firstErr = fmt.Errorf("bench bare: stream %d: %w", s, err)
						cancel()
					})
					return
				}
				mu.Lock()
				for _, m := range claimed {
					seen[m]++
				}
				mu.Unlock()
				done += n
				p.update(int(processed.Add(int64(len(claimed)))))
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	took := time.Since(start)
	for _, n := range seen {
		if n > 1 {
			res.Duplicates += n - 1
		}
	}
	res.Processed = len(seen)
	res.RedisCPUUsPerJob = cpu.perRun(ctx, res.Processed)
	res.JobsPerSec = round(float64(res.Processed) / took.Seconds())
	return res, nil
}

// bareKeys are one stream's due, ready and in-flight sets, under one hash tag.
func bareKeys(ns string, stream int) [3]string {
	p := ns + ":bare:{" + strconv.Itoa(stream) + "}:"
	return [3]string{p + "due", p + "ready", p + "inflight"}
}

// bareBatch takes n jobs of a stream, numbered from first, through the four steps and
// returns the members it claimed and acked. Every job of the batch is due when it is
// promoted, so a batch moves whole; the promote and claim are repeated should a short
// one leave some behind.
func bareBatch(ctx context.Context, rc rueidis.Client, keys [3]string, stream, first, n int, body string) ([]string, error) {
	now := time.Now().UnixMilli()
	add := rc.B().Zadd().Key(keys[0]).ScoreMember()
	for i := first; i < first+n; i++ {
		add = add.ScoreMember(float64(now), strconv.Itoa(stream)+"-"+strconv.Itoa(i)+"|"+body)
	}
	if err := rc.Do(ctx, add.Build()).Error(); err != nil {
		return nil, fmt.Errorf("ZADD due: %w", err)
	}
	var claimed []string
	for len(claimed) < n {
		batch := strconv.Itoa(n - len(claimed))
		if err := barePromote.Exec(ctx, rc, keys[:2], []string{strconv.FormatInt(now, 10), batch}).Error(); err != nil {
			return nil, fmt.Errorf("promote: %w", err)
		}
		deadline := strconv.FormatInt(time.Now().Add(30*time.Second).UnixMilli(), 10)
		got, err := bareClaim.Exec(ctx, rc, keys[1:], []string{deadline, batch}).AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		if len(got) == 0 {
			return nil, fmt.Errorf("claim: nothing ready with %d of %d jobs left", n-len(claimed), n)
		}
		if err := rc.Do(ctx, rc.B().Zrem().Key(keys[2]).Member(got...).Build()).Error(); err != nil {
			return nil, fmt.Errorf("ZREM in-flight: %w", err)
		}
		claimed = append(claimed, got...)
	}
	return claimed, nil
}
