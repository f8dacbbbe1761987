package shard

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/job"
)

// Per-minute figures: each queue gets one small hash per minute (Keys.Figures) that
// expires after FiguresTTL, so a queue costs at most about FiguresTTL/1m hashes of a few
// dozen short fields (a listpack: ~300 bytes each, ~20 KB per queue) whatever its
// traffic. Workers add what they measured once a second (AddFigures, one HINCRBY per
// non-zero field); dispatchers sample each queue's fired total (SampleFired, HSETNX:
// the first sample of a minute wins, so any number of dispatchers agree). Every command
// touches one key, so the pipelines are Cluster-safe.

// FiguresTTL is how long a minute's figures are kept after they were last written.
const FiguresTTL = 2 * time.Hour

// LatenessBounds are the upper bounds of the lateness histogram's buckets; the last
// bucket (index len(LatenessBounds)) holds everything above.
var LatenessBounds = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
	30 * time.Second, time.Minute,
}

// NumLatenessBuckets is the histogram's bucket count.
const NumLatenessBuckets = 16

// LatenessBucket returns the histogram bucket of lateness d.
func LatenessBucket(d time.Duration) int {
	return sort.Search(len(LatenessBounds), func(i int) bool { return d <= LatenessBounds[i] })
}

// Minute returns the minute number of t (unix ms / 60000), as Keys.Figures takes it.
func Minute(t time.Time) int64 { return t.UnixMilli() / 60000 }

// FigureKey names one queue's minute.
type FigureKey struct {
	Queue  string
	Minute int64
}

// FigureDelta is what a worker measured in one queue's minute.
type FigureDelta struct {
	Ended     int64 // runs whose attempt ended
	LateSumMs int64
	Lateness  [NumLatenessBuckets]int64
}

// Add counts one run with lateness d.
func (f *FigureDelta) Add(d time.Duration) {
	f.Ended++
	f.LateSumMs += max(d, 0).Milliseconds()
	f.Lateness[LatenessBucket(d)]++
}

// AddFigures adds deltas to the per-minute figures, in one pipeline. It returns the
// first error.
func (s *Store) AddFigures(ctx context.Context, deltas map[FigureKey]*FigureDelta) error {
	var cmds rueidis.Commands
	ttl := FiguresTTL.Milliseconds()
	for k, d := range deltas {
		key := s.keys.Figures(k.Queue, k.Minute)
		if d.Ended > 0 {
			cmds = append(cmds, s.c.B().Hincrby().Key(key).Field("n").Increment(d.Ended).Build())
		}
		if d.LateSumMs > 0 {
			cmds = append(cmds, s.c.B().Hincrby().Key(key).Field("s").Increment(d.LateSumMs).Build())
		}
		for i, n := range d.Lateness {
			if n > 0 {
				cmds = append(cmds, s.c.B().Hincrby().Key(key).Field("b"+strconv.Itoa(i)).Increment(n).Build())
			}
		}
		cmds = append(cmds, s.c.B().Pexpire().Key(key).Milliseconds(ttl).Build())
	}
	return firstError("add figures", s.c.DoMulti(ctx, cmds...))
}

func firstError(what string, rs []rueidis.RedisResult) error {
	for _, r := range rs {
		if err := r.Error(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// SampleFired records each queue's fired total as the figure 'c' of the minute of now,
// unless that minute has one already. Fires in minute m are then c(m+1) - c(m), up to
// the sampling interval's error at each end.
func (s *Store) SampleFired(ctx context.Context, now time.Time) error {
	byQueue, _, err := s.stats(ctx)
	if err != nil {
		return err
	}
	m := Minute(now)
	cmds := make(rueidis.Commands, 0, 2*len(byQueue))
	for q, st := range byQueue {
		key := s.keys.Figures(q, m)
		cmds = append(cmds, s.c.B().Hsetnx().Key(key).Field("c").Value(strconv.FormatInt(st.Fired, 10)).Build(),
			s.c.B().Pexpire().Key(key).Milliseconds(FiguresTTL.Milliseconds()).Build())
	}
	return firstError("sample fired totals", s.c.DoMulti(ctx, cmds...))
}

// WorkerSeen records that worker was alive at t, and forgets workers not seen for
// FiguresTTL (so the set stays as small as the workers of the last two hours).
func (s *Store) WorkerSeen(ctx context.Context, worker string, t time.Time) error {
	key := s.keys.Workers()
	return firstError("record worker", s.c.DoMulti(ctx,
		s.c.B().Zadd().Key(key).ScoreMember().ScoreMember(float64(t.UnixMilli()), worker).Build(),
		s.c.B().Zremrangebyscore().Key(key).Min("-inf").Max(strconv.FormatInt(t.Add(-FiguresTTL).UnixMilli(), 10)).Build()))
}

// WorkerInfo is a worker seen recently.
type WorkerInfo struct {
	ID       string
	LastSeen time.Time
}

// Workers returns the workers seen since `since`, most recent first (at most 1000).
func (s *Store) Workers(ctx context.Context, since time.Time) ([]WorkerInfo, error) {
	zs, err := s.c.Do(ctx, s.c.B().Zrevrangebyscore().Key(s.keys.Workers()).Max("+inf").
		Min(strconv.FormatInt(since.UnixMilli(), 10)).Withscores().Limit(0, 1000).Build()).AsZScores()
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	out := make([]WorkerInfo, len(zs))
	for i, z := range zs {
		out[i] = WorkerInfo{ID: z.Member, LastSeen: time.UnixMilli(int64(z.Score))}
	}
	return out, nil
}

// MinuteFigures are one queue's figures of one minute.
type MinuteFigures struct {
	Minute time.Time
	// Fired is the runs made ready in the minute; -1 when unknown (no dispatcher sampled
	// the minute or the next one).
	Fired     int64
	Ended     int64 // runs whose attempt ended (the lateness figures count these)
	LateSumMs int64
	Lateness  [NumLatenessBuckets]int64
}

// QueueFigures are one queue's per-minute figures, oldest minute first.
type QueueFigures struct {
	Queue   string
	Minutes []MinuteFigures
}

// MaxFigureMinutes bounds the minutes one Figures call reads.
const MaxFigureMinutes = 120

// Figures returns the per-minute figures of the minutes from `from` to `to` (at most
// MaxFigureMinutes) of queues (nil: every queue with figures in Stats), sorted by
// queue. The current minute's fired count is measured against the live total.
func (s *Store) Figures(ctx context.Context, queues []string, from, to time.Time) ([]QueueFigures, error) {
	first, last := Minute(from), Minute(to)
	if last < first || last-first >= MaxFigureMinutes {
		return nil, &job.FieldError{Field: "minutes", Msg: fmt.Sprintf("must be 1 to %d minutes", MaxFigureMinutes)}
	}
	byQueue, _, err := s.stats(ctx)
	if err != nil {
		return nil, err
	}
	if queues == nil {
		for q := range byQueue {
			queues = append(queues, q)
		}
	}
	sort.Strings(queues)
	n := int(last - first + 2) // and the minute after last, for its fired total
	cmds := make(rueidis.Commands, 0, len(queues)*n)
	for _, q := range queues {
		for m := first; m <= last+1; m++ {
			cmds = append(cmds, s.c.B().Hgetall().Key(s.keys.Figures(q, m)).Build())
		}
	}
	res := s.c.DoMulti(ctx, cmds...)
	out := make([]QueueFigures, len(queues))
	for qi, q := range queues {
		qf := QueueFigures{Queue: q, Minutes: make([]MinuteFigures, 0, n-1)}
		totals := make([]int64, n) // fired total at each minute's first sample; -1 none
		for i := range n {
			h, err := res[qi*n+i].AsStrMap()
			if err != nil {
				return nil, fmt.Errorf("figures of queue %q: %w", q, err)
			}
			totals[i] = -1
			if c, ok := h["c"]; ok {
				totals[i], _ = strconv.ParseInt(c, 10, 64)
			}
			if i == n-1 {
				break
			}
			mf := MinuteFigures{Minute: time.UnixMilli((first + int64(i)) * 60000), Fired: -1}
			mf.Ended, _ = strconv.ParseInt(h["n"], 10, 64)
			mf.LateSumMs, _ = strconv.ParseInt(h["s"], 10, 64)
			for b := range mf.Lateness {
				mf.Lateness[b], _ = strconv.ParseInt(h["b"+strconv.Itoa(b)], 10, 64)
			}
			qf.Minutes = append(qf.Minutes, mf)
		}
		if st := byQueue[q]; st != nil && last == Minute(time.Now()) {
			// The current minute ends against the live total; and until a dispatcher has
			// sampled it (within seconds), it also begins there.
			totals[n-1] = st.Fired
			if totals[n-2] < 0 {
				totals[n-2] = st.Fired
			}
		}
		for i := range qf.Minutes {
			if totals[i] >= 0 && totals[i+1] >= 0 {
				qf.Minutes[i].Fired = max(totals[i+1]-totals[i], 0)
			}
		}
		out[qi] = qf
	}
	return out, nil
}

// LatenessQuantile returns the q-quantile (0 < q ≤ 1) of a lateness histogram, as the
// upper bound of the bucket it falls in (the last bucket reports its lower bound); ok is
// false for an empty histogram.
func LatenessQuantile(h [NumLatenessBuckets]int64, q float64) (d time.Duration, ok bool) {
	var total int64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0, false
	}
	rank := int64(q*float64(total) + 0.999999)
	var seen int64
	for i, n := range h {
		if seen += n; seen >= rank {
			if i < len(LatenessBounds) {
				return LatenessBounds[i], true
			}
			break
		}
	}
	return LatenessBounds[len(LatenessBounds)-1], true
}
