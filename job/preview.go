package job

import (
	"fmt"
	"math"
	"time"
)

// MaxPreview bounds the fire times one Preview returns.
const MaxPreview = 100

// DST notes of a previewed fire time (Fire.DST).
const (
	// DSTMoved: the wall time the expression names does not exist on that day (the clocks
	// jumped forward over it), so the run fires at the first instant after the jump.
	DSTMoved = "moved"
	// DSTRepeatSkipped: the wall time occurs twice on that day (the clocks went back); a
	// fixed-hour expression fires on the first pass only, so the second is skipped.
	DSTRepeatSkipped = "repeat_skipped"
	// DSTRepeated: the wall time occurs twice and an expression with a wildcard hour
	// follows elapsed time, so it fires in both passes; this is one of them.
	DSTRepeated = "repeated"
	// DSTGapSkipped: an expression with a wildcard hour matched wall times that did not
	// exist (the clocks jumped forward over them) before this fire time: they did not fire.
	DSTGapSkipped = "gap_skipped"
)

// Fire is one previewed fire time of a cron expression.
type Fire struct {
	At time.Time // in the expression's zone
	// DST is "" or one of the DST… notes: what a daylight-saving change did here.
	DST string
	// Note says it in words, e.g. "02:30 does not exist on 2027-03-14 (clocks jump from
	// 02:00 to 03:00): fires at 03:00 EDT"; "" when DST is "".
	Note string
}

// Preview returns the next n fire times strictly after `after` (n from 1 to MaxPreview),
// each with a note where a daylight-saving change moved it, repeated it or skipped an
// occurrence near it. Fewer come back when the expression stops firing within Next's
// horizon.
func (c *Cron) Preview(after time.Time, n int) []Fire {
	n = max(1, min(n, MaxPreview))
	out := make([]Fire, 0, n)
	prev := after
	for len(out) < n {
		t := c.Next(prev)
		if t.IsZero() {
			break
		}
		f := Fire{At: t}
		f.DST, f.Note = c.dstNote(prev, t)
		out = append(out, f)
		prev = t
	}
	return out
}

// matchesWall reports whether the expression matches wall time w (the wall clock read as
// UTC, in seconds).
func (c *Cron) matchesWall(w int64) bool {
	got, ok := c.nextWall(w, w)
	return ok && got == w
}

// dstNote explains what a daylight-saving change did to fire time t, the first after prev.
func (c *Cron) dstNote(prev, t time.Time) (kind, note string) {
	if c.loc == time.UTC {
		return "", ""
	}
	u := t.Unix()
	p := c.periodAt(u)
	w := u + p.off
	clock := func(w int64) string { return time.Unix(w, 0).UTC().Format("15:04") }
	day := time.Unix(w, 0).UTC().Format("2006-01-02")
	zone := func(t time.Time) string { name, _ := t.Zone(); return name }

	// Moved out of a gap: the fire time is the start of a period entered by a jump
	// forward, and its own wall time does not match (the expression named a skipped one).
	if !c.matchesWall(w) && p.start == u {
		before := c.periodAt(u - 1)
		if gapFrom := u + before.off; gapFrom < w {
			named, ok := c.nextWall(gapFrom, w-1)
			if ok {
				return DSTMoved, fmt.Sprintf("%s does not exist on %s (clocks jump from %s to %s): fires at %s %s",
					clock(named), day, clock(gapFrom), clock(w), clock(w), zone(t))
			}
		}
	}
	// A wall time that repeats: the period after p starts with a jump back over it (t is
	// on the first pass), or p did (t is on the second pass).
	if p.end != math.MaxInt64 {
		next := c.periodAt(p.end)
		if back := p.off - next.off; back > 0 && w >= p.end+next.off {
			again := time.Unix(u+back, 0).In(c.loc)
			if c.wildHour {
				return DSTRepeated, fmt.Sprintf("%s occurs twice on %s (clocks go back from %s to %s): fires in both passes, this is the first (%s)",
					clock(w), day, clock(p.end+p.off), clock(p.end+next.off), zone(t))
			}
			return DSTRepeatSkipped, fmt.Sprintf("%s occurs twice on %s (clocks go back from %s to %s): fires on the first pass (%s) only; the repeat at %s %s is skipped",
				clock(w), day, clock(p.end+p.off), clock(p.end+next.off), zone(t), clock(w), zone(again))
		}
	}
	if p.start != math.MinInt64 && p.start > math.MinInt64/2 {
		before := c.periodAt(p.start - 1)
		if back := before.off - p.off; back > 0 && w < p.start+before.off && c.wildHour {
			return DSTRepeated, fmt.Sprintf("%s occurs twice on %s (clocks went back from %s to %s): fires in both passes, this is the second (%s)",
				clock(w), day, clock(p.start+before.off), clock(p.start+p.off), zone(t))
		}
		// A wildcard-hour expression skips the wall times of a gap between prev and t.
		if fwd := p.start + p.off - (p.start + before.off); fwd > 0 && c.wildHour && p.start > prev.Unix() && p.start <= u {
			gapFrom, gapTo := p.start+before.off, p.start+p.off
			if named, ok := c.nextWall(gapFrom, gapTo-1); ok {
				return DSTGapSkipped, fmt.Sprintf("%s to %s did not exist on %s (clocks jumped forward): the occurrences from %s in it did not fire",
					clock(gapFrom), clock(gapTo), day, clock(named))
			}
		}
	}
	return "", ""
}
