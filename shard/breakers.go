package shard

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Breaker states.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// BreakerPolicy is when a breaker opens and how it closes again (see breaker_step.lua).
type BreakerPolicy struct {
	Failures     int           // consecutive failures that open it; 0: no such rule
	Ratio        float64       // failure ratio in a Window that opens it; 0: no such rule
	MinRequests  int           // attempts a Window needs before its Ratio counts
	Window       time.Duration // length of a ratio window
	Cooldown     time.Duration // how long it stays open before a half-open probe
	ProbeTimeout time.Duration // how long a probe is out before another may go
	// ProbeWait is how long a delivery refused while the probe is out waits before it
	// asks again, or as long as the probe has been out if that is longer (at most until
	// ProbeTimeout): the runs held while a probe is out go soon after its outcome closes
	// the breaker, not at the probe's timeout.
	ProbeWait time.Duration
}

// WithDefaults returns p with the defaults of the fields left zero: 5 consecutive
// failures (negative: no such rule), 20 attempts a window, a 1m window, a 30s cooldown,
// a 2m probe timeout and a 1s probe wait. The executor's breakers and the SDK's take
// these.
func (p BreakerPolicy) WithDefaults() BreakerPolicy {
	if p.Failures == 0 {
		p.Failures = 5
	} else if p.Failures < 0 {
		p.Failures = 0
	}
	if p.MinRequests == 0 {
		p.MinRequests = 20
	}
	if p.Window == 0 {
		p.Window = time.Minute
	}
	if p.Cooldown == 0 {
		p.Cooldown = 30 * time.Second
	}
	if p.ProbeTimeout == 0 {
		p.ProbeTimeout = 2 * time.Minute
	}
	if p.ProbeWait == 0 {
		p.ProbeWait = time.Second
	}
	return p
}

// BreakerStep is the reply of one breaker step.
type BreakerStep struct {
	State string
	// Verdict of an allow: 1 go, 2 go as the half-open probe, 0 refused.
	Verdict int
	// RetryIn is, when open, the time until a probe may go; when half-open, how long a
	// refused delivery waits before it asks again (BreakerPolicy.ProbeWait); else 0.
	RetryIn    time.Duration
	Transition string // the state entered by this step, or ""
	// Failures, Attempts and WindowFails are the consecutive failures and the current
	// window's attempts and failures after the step (0 unless closed).
	Failures, Attempts, WindowFails int
}

// BreakerCounts are outcomes of deliveries recorded in aggregate (BreakerSync): a
// process counts them with Add and records them now and then rather than one step per
// delivery. The zero value holds none.
type BreakerCounts struct {
	OK, Failed int
	Lead       int // failures before the first success (all of them when OK is 0)
	Longest    int // the longest run of consecutive failures
	Trail      int // failures after the last success (all of them when OK is 0)
}

// Add counts one outcome after those already counted.
func (c *BreakerCounts) Add(healthy bool) {
	if healthy {
		c.OK++
		c.Trail = 0
		return
	}
	c.Failed++
	c.Trail++
	if c.OK == 0 {
		c.Lead++
	}
	c.Longest = max(c.Longest, c.Trail)
}

// Then returns the counts of c followed by those of d.
func (c BreakerCounts) Then(d BreakerCounts) BreakerCounts {
	out := BreakerCounts{OK: c.OK + d.OK, Failed: c.Failed + d.Failed, Lead: c.Lead, Trail: d.Trail,
		Longest: max(c.Longest, d.Longest, c.Trail+d.Lead)}
	if c.OK == 0 {
		out.Lead = c.Lead + d.Lead
	}
	if d.OK == 0 {
		out.Trail = c.Trail + d.Trail
	}
	return out
}

// Zero reports whether c holds no outcome.
func (c BreakerCounts) Zero() bool { return c.OK+c.Failed == 0 }

// breakerTTL keeps a breaker's key this long after its last change.
const breakerTTL = 7 * 24 * time.Hour

// BreakerStep runs one step of host's breaker: op "allow", "ok" or "fail" (probe marks
// the outcome of the half-open probe). A failure also files the host in the Breakers
// list, which Breakers reads.
func (s *Store) BreakerStep(ctx context.Context, host, op string, probe bool, p BreakerPolicy) (BreakerStep, error) {
	return s.breakerStep(ctx, host, op, probe, BreakerCounts{}, p)
}

// BreakerSync records the outcomes c (none is fine) of deliveries to host, other than a
// probe's, in one step; with allow it then asks whether a delivery may go, as
// BreakerStep's "allow" does. Failures also file the host in the Breakers list.
func (s *Store) BreakerSync(ctx context.Context, host string, c BreakerCounts, allow bool, p BreakerPolicy) (BreakerStep, error) {
	op := "add"
	if allow {
		op = "allow"
	}
	return s.breakerStep(ctx, host, op, false, c, p)
}

func (s *Store) breakerStep(ctx context.Context, host, op string, probe bool, c BreakerCounts, p BreakerPolicy) (BreakerStep, error) {
	p = p.withWait()
	pr := "0"
	if probe {
		pr = "1"
	}
	args := []string{op, strconv.Itoa(p.Failures), strconv.FormatFloat(p.Ratio, 'g', -1, 64),
		strconv.Itoa(p.MinRequests), strconv.FormatInt(p.Window.Milliseconds(), 10),
		strconv.FormatInt(p.Cooldown.Milliseconds(), 10), strconv.FormatInt(p.ProbeTimeout.Milliseconds(), 10),
		pr, strconv.FormatInt(breakerTTL.Milliseconds(), 10), strconv.FormatInt(p.ProbeWait.Milliseconds(), 10)}
	if !c.Zero() {
		args = append(args, strconv.Itoa(c.OK), strconv.Itoa(c.Failed), strconv.Itoa(c.Lead),
			strconv.Itoa(c.Longest), strconv.Itoa(c.Trail))
	}
	reply, err := s.exec1(ctx, call{s.scripts.BreakerStep, []string{s.keys.Breaker(host)}, args}).ToArray()
	if err == nil && len(reply) != 7 {
		err = fmt.Errorf("reply of %d values, want 7", len(reply))
	}
	if err != nil {
		return BreakerStep{}, fmt.Errorf("breaker of %s: %w", host, err)
	}
	st := BreakerStep{State: str(reply[0]), Verdict: int(i64(reply[1])),
		RetryIn: time.Duration(i64(reply[2])) * time.Millisecond, Transition: str(reply[3]),
		Failures: int(i64(reply[4])), Attempts: int(i64(reply[5])), WindowFails: int(i64(reply[6]))}
	if op == "fail" || c.Failed > 0 || st.Transition != "" {
		now := time.Now().UnixMilli()
		if err := s.c.Do(ctx, s.c.B().Zadd().Key(s.keys.Breakers()).ScoreMember().ScoreMember(float64(now), host).Build()).Error(); err != nil {
			return st, fmt.Errorf("breaker of %s: list: %w", host, err)
		}
	}
	return st, nil
}

// withWait gives a policy made without WithDefaults its ProbeWait.
func (p BreakerPolicy) withWait() BreakerPolicy {
	if p.ProbeWait <= 0 {
		p.ProbeWait = BreakerPolicy{}.WithDefaults().ProbeWait
	}
	return p
}

// BreakerInfo is the state of one host's breaker as stored.
type BreakerInfo struct {
	Host        string
	State       string
	Failures    int       // consecutive failures (closed)
	Attempts    int       // in the current window (closed)
	WindowFails int       // failures in the current window (closed)
	OpenedAt    time.Time // zero unless open or half-open
	ChangedAt   time.Time // the last transition; zero when none
	Transitions int64
}

// Breakers returns the breakers of the hosts that failed in the last week (the key's
// TTL), at most limit of them (0: 1000), the most recently reported first.
func (s *Store) Breakers(ctx context.Context, limit int) ([]BreakerInfo, error) {
	if limit <= 0 {
		limit = 1000
	}
	cut := time.Now().Add(-breakerTTL).UnixMilli()
	_ = s.c.Do(ctx, s.c.B().Zremrangebyscore().Key(s.keys.Breakers()).Min("-inf").Max(strconv.FormatInt(cut, 10)).Build()).Error()
	hosts, err := s.c.Do(ctx, s.c.B().Zrange().Key(s.keys.Breakers()).Min("+inf").Max("-inf").Byscore().Rev().Limit(0, int64(limit)).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("breakers: %w", err)
	}
	out := make([]BreakerInfo, 0, len(hosts))
	for _, h := range hosts {
		m, err := s.c.Do(ctx, s.c.B().Hgetall().Key(s.keys.Breaker(h)).Build()).AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("breaker of %s: %w", h, err)
		}
		atoi := func(f string) int64 { v, _ := strconv.ParseInt(m[f], 10, 64); return v }
		b := BreakerInfo{Host: h, State: m["s"], Failures: int(atoi("f")), Attempts: int(atoi("n")),
			WindowFails: int(atoi("nf")), Transitions: atoi("tr")}
		if b.State == "" {
			b.State = BreakerClosed
		}
		if o := atoi("o"); o > 0 && b.State != BreakerClosed {
			b.OpenedAt = time.UnixMilli(o)
		}
		if at := atoi("at"); at > 0 {
			b.ChangedAt = time.UnixMilli(at)
		}
		out = append(out, b)
	}
	return out, nil
}
