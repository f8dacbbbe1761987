package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Lease is a dispatcher's hold on a shard. Epoch is the fencing token: it grows with
// every new owner, and every state-changing dispatcher script checks `Owner:Epoch`.
type Lease struct {
	Shard ID
	Owner string
	Epoch int64
}

func (l Lease) value() string { return l.Owner + ":" + strconv.FormatInt(l.Epoch, 10) }

// LeaseResult is the outcome of trying to take or renew one lease.
type LeaseResult struct {
	Lease Lease
	Held  bool          // the caller holds the lease
	TTL   time.Duration // remaining time of the other owner's lease when not Held
	Err   error
}

// AcquireLeases takes or renews the leases of shards for owner, in one pipeline. A lease
// held by another owner is reported with Held false. owner must not contain ':'.
func (s *Store) AcquireLeases(ctx context.Context, owner string, shards []ID, ttl time.Duration) []LeaseResult {
	calls := make([]call, len(shards))
	for i, id := range shards {
		calls[i] = call{s.scripts.AcquireLease, []string{s.keys.Lease(id), s.keys.Epoch(id)},
			[]string{owner, strconv.FormatInt(ttl.Milliseconds(), 10)}}
	}
	out := make([]LeaseResult, len(shards))
	for i, r := range s.exec(ctx, calls...) {
		out[i].Lease = Lease{Shard: shards[i], Owner: owner}
		reply, err := r.ToArray()
		if err != nil || len(reply) != 2 {
			out[i].Err = fmt.Errorf("acquire lease of shard %d: %v", shards[i], err)
			continue
		}
		if e := i64(reply[0]); e > 0 {
			out[i].Lease.Epoch, out[i].Held = e, true
		} else {
			out[i].TTL = time.Duration(i64(reply[1])) * time.Millisecond
		}
	}
	return out
}

// ReleaseLease gives a lease up if it is still held; released reports whether it was.
func (s *Store) ReleaseLease(ctx context.Context, l Lease) (released bool, err error) {
	n, err := s.exec1(ctx, call{s.scripts.ReleaseLease, []string{s.keys.Lease(l.Shard)}, []string{l.value()}}).AsInt64()
	if err != nil {
		return false, fmt.Errorf("release lease of shard %d: %w", l.Shard, err)
	}
	return n == 1, nil
}

// Heartbeat records that dispatcher name is alive for ttl (or removes it when leaving)
// and returns the names of the live dispatchers.
func (s *Store) Heartbeat(ctx context.Context, name string, ttl time.Duration, leaving bool) ([]string, error) {
	l := "0"
	if leaving {
		l = "1"
	}
	names, err := s.exec1(ctx, call{s.scripts.HeartbeatMember, []string{s.keys.Members()},
		[]string{name, strconv.FormatInt(ttl.Milliseconds(), 10), l}}).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("dispatcher heartbeat: %w", err)
	}
	return names, nil
}

// Due kinds.
const (
	KindOnce  = "once"  // first run of a one-time job
	KindRetry = "retry" // a run waiting for its next attempt
	KindCron  = "cron"  // the next occurrence of a recurring job
)

// DueEntry is one due cron occurrence as fire_due saw it.
type DueEntry struct {
	Member       string
	Due          int64 // the run's due time (ms), from its member
	Score        int64 // when it became due (ms)
	Kind         string
	Cron, TZ     string
	Version      string
	Misfire      string
	MisfireAfter time.Duration
}

// Due is what one fire_due call did and saw on a shard.
type Due struct {
	Now          int64 // Redis TIME, ms
	NextDue      int64 // earliest due time after Now + lead; Now when more is due; -1 nothing
	NextDeadline int64 // earliest visibility deadline; -1 nothing in flight
	Fired        int   // one-time runs and retries made ready
	Cron         []DueEntry
}

// FireDue fires, under lease, up to limit one-time runs and retries of a shard that are
// due within lead of the Redis clock, and returns the cron occurrences due within lead
// for the caller to plan and Fire. A run fired ahead of its time is held by the worker
// that claims it until then (Claimed.StartAt). It signals the queues that got runs, and
// returns ErrLeaseLost when the lease is gone.
func (s *Store) FireDue(ctx context.Context, l Lease, limit int, lead time.Duration) (*Due, error) {
	r := s.exec1(ctx, call{s.scripts.FireDue, []string{s.keys.Buckets(l.Shard), s.keys.Inflight(l.Shard), s.keys.Lease(l.Shard)},
		[]string{s.keys.Prefix(l.Shard), strconv.FormatInt(s.bucketMs, 10), l.value(), strconv.Itoa(limit),
			s.keys.ReadyChannel(""), strconv.Itoa(int(l.Shard)), strconv.FormatInt(max(lead.Milliseconds(), 0), 10),
			s.cfg.thawMs()}})
	if code, err := r.AsInt64(); err == nil && code < 0 {
		return nil, codeError(code)
	}
	reply, err := r.ToArray()
	if err != nil || len(reply) != 6 {
		return nil, fmt.Errorf("fire due runs of shard %d: %v", l.Shard, err)
	}
	// The script has published the ready signals itself.
	d := &Due{Now: i64(reply[0]), NextDue: i64(reply[1]), NextDeadline: i64(reply[2]), Fired: int(i64(reply[3]))}
	raw := arr(reply[5])
	for k := 0; k+6 < len(raw); k += 7 {
		e := DueEntry{
			Member: str(raw[k]), Score: i64(raw[k+1]), Kind: KindCron,
			Cron: str(raw[k+2]), TZ: str(raw[k+3]), Version: str(raw[k+4]), Misfire: str(raw[k+5]),
			MisfireAfter: time.Duration(i64(raw[k+6])) * time.Millisecond,
		}
		_, e.Due, _ = SplitMember(e.Member)
		d.Cron = append(d.Cron, e)
	}
	return d, nil
}

// FirePlan is what to do with one due entry. For a cron entry the dispatcher fills in
// the occurrences to fire, how many it records as missed and the next one to file.
type FirePlan struct {
	Entry  DueEntry
	Fires  []int64 // cron: occurrences (ms) to fire
	Missed int     // cron: occurrences recorded as missed
	Next   int64   // cron: next occurrence to file (0 none)
}

// Fire carries out plans under lease: due runs move to their ready sets (if they are
// still due as FireDue saw them), recurring jobs are filed at their next occurrence. It signals
// the queues that got runs and returns how many runs became ready, or ErrLeaseLost.
func (s *Store) Fire(ctx context.Context, l Lease, plans []FirePlan) (fired int, err error) {
	args := make([]string, 0, 5+len(plans)*7)
	args = append(args, s.keys.Prefix(l.Shard), strconv.FormatInt(s.bucketMs, 10), l.value(),
		strconv.Itoa(s.cfg.History), strconv.Itoa(len(plans)))
	for _, p := range plans {
		ver := ""
		if p.Entry.Kind == KindCron {
			ver = p.Entry.Version
		}
		args = append(args, p.Entry.Member, strconv.FormatInt(p.Entry.Score, 10), ver,
			strconv.FormatInt(p.Next, 10), strconv.Itoa(p.Missed), strconv.Itoa(len(p.Fires)))
		for _, f := range p.Fires {
			args = append(args, strconv.FormatInt(f, 10))
		}
	}
	r := s.exec1(ctx, call{s.scripts.FireRuns, []string{s.keys.Buckets(l.Shard), s.keys.Lease(l.Shard)}, args})
	return s.countAndSignal(ctx, r, l.Shard, "fire")
}

// Reap sends up to limit runs of a shard whose visibility deadline passed back through
// the fail path (retry or dead-letter set), under lease. It returns how many it reaped,
// or ErrLeaseLost. The script signals the queues that got ready runs and the shard's
// dispatcher itself (finish_runs), also when it fails after part of its work.
func (s *Store) Reap(ctx context.Context, l Lease, limit int) (int, error) {
	r := s.exec1(ctx, s.finishCall(l.Shard, "reap", l.value(), []string{strconv.Itoa(limit)}))
	n, _, err := countOf(r, l.Shard, "reap")
	return n, err
}

// countAndSignal decodes the reply of a leased script, { count, queues } or a negative
// code, signals the queues that got ready runs, and returns count.
func (s *Store) countAndSignal(ctx context.Context, r rueidis.RedisResult, id ID, what string) (int, error) {
	n, reply, err := countOf(r, id, what)
	if err != nil {
		return 0, err
	}
	s.publish(ctx, s.readySignals(nil, id, strs(reply[1])))
	return n, nil
}

// countOf decodes the reply of a leased script, { count, queues [, wake] } or a negative
// code, and returns count and the reply.
func countOf(r rueidis.RedisResult, id ID, what string) (int, []rueidis.RedisMessage, error) {
	if code, err := r.AsInt64(); err == nil && code < 0 {
		return 0, nil, codeError(code)
	}
	reply, err := r.ToArray()
	if err != nil || len(reply) < 2 {
		return 0, nil, fmt.Errorf("%s shard %d: %v", what, id, err)
	}
	return int(i64(reply[0])), reply, nil
}

// finishCall is a finish_runs call on shard id. The script publishes the ready and wake
// signals of what it filed itself, so that they leave whatever becomes of the call's
// reply: a call that fails after part of its work (a workflow whose move fails) returns
// none, and a reply lost on its way (a timeout, a dropped connection) would take them
// with it, leaving the runs it made ready to the workers' sweep.
func (s *Store) finishCall(id ID, mode, lease string, rest []string) call {
	args := append([]string{
		s.keys.Prefix(id), strconv.FormatInt(s.bucketMs, 10), strconv.Itoa(s.cfg.History),
		strconv.FormatInt(s.cfg.Retention.Milliseconds(), 10), mode, lease,
		strconv.FormatFloat(rand.Float64(), 'f', 6, 64),
		s.keys.ReadyChannel(""), s.keys.WakeChannel(), strconv.Itoa(int(id)),
	}, rest...)
	return call{s.scripts.FinishRuns, []string{s.keys.Inflight(id), s.keys.Buckets(id), s.keys.Dead(id), s.keys.Lease(id)}, args}
}

// ParseWake decodes a wake signal: "<shard> <due ms>".
func ParseWake(msg string) (ID, int64, bool) {
	a, b, ok := strings.Cut(msg, " ")
	if !ok {
		return 0, 0, false
	}
	id, err1 := strconv.Atoi(a)
	due, err2 := strconv.ParseInt(b, 10, 64)
	return ID(id), due, err1 == nil && err2 == nil
}

// Subscribe delivers messages of channels to fn until ctx ends or the connection fails
// (it returns the error; callers loop). It is the one way the other packages listen to
// tock's signals.
func (s *Store) Subscribe(ctx context.Context, channels []string, fn func(channel, msg string)) error {
	return s.c.Receive(ctx, s.c.B().Subscribe().Channel(channels...).Build(), func(m rueidis.PubSubMessage) {
		fn(m.Channel, m.Message)
	})
}
