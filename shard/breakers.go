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
}

// WithDefaults returns p with the defaults of the fields left zero: 5 consecutive
// failures (negative: no such rule), 20 attempts a window, a 1m window, a 30s cooldown
// and a 2m probe timeout. The executor's breakers and the SDK's take these.
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
	return p
}

// BreakerStep is the reply of one breaker step.
type BreakerStep struct {
	State string
	// Verdict of an allow: 1 go, 2 go as the half-open probe, 0 refused.
	Verdict    int
	RetryIn    time.Duration // when refused: until a probe may go
	Transition string        // the state entered by this step, or ""
}

// breakerTTL keeps a breaker's key this long after its last change.
const breakerTTL = 7 * 24 * time.Hour

// BreakerStep runs one step of host's breaker: op "allow", "ok" or "fail" (probe marks
// the outcome of the half-open probe). A failure also files the host in the Breakers
// list, which Breakers reads.
func (s *Store) BreakerStep(ctx context.Context, host, op string, probe bool, p BreakerPolicy) (BreakerStep, error) {
	pr := "0"
	if probe {
		pr = "1"
	}
	args := []string{op, strconv.Itoa(p.Failures), strconv.FormatFloat(p.Ratio, 'g', -1, 64),
		strconv.Itoa(p.MinRequests), strconv.FormatInt(p.Window.Milliseconds(), 10),
		strconv.FormatInt(p.Cooldown.Milliseconds(), 10), strconv.FormatInt(p.ProbeTimeout.Milliseconds(), 10),
		pr, strconv.FormatInt(breakerTTL.Milliseconds(), 10)}
	reply, err := s.exec1(ctx, call{s.scripts.BreakerStep, []string{s.keys.Breaker(host)}, args}).ToArray()
	if err == nil && len(reply) != 4 {
		err = fmt.Errorf("reply of %d values, want 4", len(reply))
	}
	if err != nil {
		return BreakerStep{}, fmt.Errorf("breaker of %s: %w", host, err)
	}
	st := BreakerStep{State: str(reply[0]), Verdict: int(i64(reply[1])),
		RetryIn: time.Duration(i64(reply[2])) * time.Millisecond, Transition: str(reply[3])}
	if op == "fail" || st.Transition != "" {
		now := time.Now().UnixMilli()
		if err := s.c.Do(ctx, s.c.B().Zadd().Key(s.keys.Breakers()).ScoreMember().ScoreMember(float64(now), host).Build()).Error(); err != nil {
			return st, fmt.Errorf("breaker of %s: list: %w", host, err)
		}
	}
	return st, nil
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
