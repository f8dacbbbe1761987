package job

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tzTransition is a change of a zone's UTC offset: at (unix seconds) is the first instant
// with the offset after.
type tzTransition struct {
	at            int64
	before, after int64
}

// tzTransitions lists the offset changes of loc in [from, to).
func tzTransitions(loc *time.Location, from, to time.Time) []tzTransition {
	var out []tzTransition
	for t0 := from.In(loc); t0.Before(to); {
		_, end := t0.ZoneBounds()
		if end.IsZero() {
			break
		}
		if !end.After(t0) { // the time package's leap-year quirk, see periodAt
			end = t0.Add(24 * time.Hour)
		}
		if !end.Before(to) {
			break
		}
		_, before := end.Add(-time.Second).Zone()
		if _, after := end.Zone(); after != before {
			out = append(out, tzTransition{at: end.Unix(), before: int64(before), after: int64(after)})
		}
		t0 = end
	}
	return out
}

// readTZZones returns the zone names of testdata/tzdata_zones.txt.
func readTZZones(t *testing.T) []string {
	f, err := os.Open("testdata/tzdata_zones.txt")
	require.NoError(t, err)
	defer f.Close()
	var zones []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			zones = append(zones, line)
		}
	}
	require.NoError(t, sc.Err())
	return zones
}

// refMinuteMatches reports whether the wall-clock minute starting at w (seconds since
// 1970-01-01 00:00 of the wall clock) matches every field of c but the seconds.
func refMinuteMatches(c *Cron, w int64) bool {
	t := time.Unix(w, 0).UTC()
	if c.min&(1<<t.Minute()) == 0 || c.hour&(1<<t.Hour()) == 0 || c.month&(1<<int(t.Month())) == 0 {
		return false
	}
	domOK := c.dom&(1<<t.Day()) != 0
	dowOK := c.dow&(1<<int(t.Weekday())) != 0
	switch {
	case c.domStar && c.dowStar:
		return true
	case c.domStar:
		return dowOK
	case c.dowStar:
		return domOK
	}
	return domOK || dowOK
}

// refFirings is the reference for Next: it walks the instants [lo, hi) minute by minute,
// as ISC cron does, and returns every firing time. warm (before lo) is where it starts
// reading the clock, so that it knows which wall times already occurred at lo.
//
//   - A wildcard-hour expression fires at every instant whose wall clock matches: a
//     repeated wall time fires in both passes, a skipped one never.
//   - A fixed-hour expression fires at an instant whose wall clock matches and has not
//     occurred before (the first pass), and once at the first instant after a forward
//     jump if a skipped wall time matches.
//
// Every offset and transition must be a whole number of minutes (true of every zone
// since 1972), so an instant's minute is one wall-clock minute.
func refFirings(c *Cron, warm, lo, hi int64) []int64 {
	var out []int64
	fire := func(u int64, fromSec int) {
		for s := fromSec; s < 60; s++ {
			if c.sec&(1<<s) != 0 {
				out = append(out, u+int64(s))
			}
		}
	}
	seen := int64(math.MinInt64) // the end of the highest wall minute that occurred
	for u := warm; u < hi; u += 60 {
		_, off := time.Unix(u, 0).In(c.loc).Zone()
		w := u + int64(off)
		if u >= lo {
			switch {
			case c.wildHour:
				if refMinuteMatches(c, w) {
					fire(u, 0)
				}
			case w >= seen:
				gap := false
				for g := seen; seen != math.MinInt64 && g < w && !gap; g += 60 {
					gap = refMinuteMatches(c, g)
				}
				if gap {
					out = append(out, u)
				}
				if refMinuteMatches(c, w) {
					if gap {
						fire(u, 1)
					} else {
						fire(u, 0)
					}
				}
			}
		}
		seen = max(seen, w+60)
	}
	return out
}

// randomCronExpr returns an expression that is likely to match wall times near tr:
// either a fixed-hour one or a wildcard-hour one.
func randomCronExpr(rng *rand.Rand, tr tzTransition, wild bool) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	before := time.Unix(tr.at-1+tr.before, 0).UTC() // the last wall time before the change
	after := time.Unix(tr.at+tr.after, 0).UTC()     // the first wall time after it
	hb, ha := before.Hour(), after.Hour()
	var hour string
	if wild {
		hour = pick("*", "*", "*/2", "*/3", "*/5")
	} else {
		lo, hi := min(hb, ha), max(hb, ha)
		hour = pick(fmt.Sprint(hb), fmt.Sprint(ha), fmt.Sprint(hb), fmt.Sprint(ha), fmt.Sprintf("%d,%d", lo, hi),
			fmt.Sprintf("%d-%d", lo, hi), fmt.Sprint((hb+23)%24), fmt.Sprint((ha+1)%24), fmt.Sprint(rng.IntN(24)))
	}
	minute := pick("0", "0", "30", "*/15", "*", "15,45", fmt.Sprint(rng.IntN(60)), "*/7", "0-10",
		fmt.Sprint(before.Minute()), fmt.Sprint(after.Minute()), "59")
	dom := pick("*", "*", "*", "*", "1-15", fmt.Sprint(after.Day()), "?")
	dow := pick("*", "*", "*", "*", "1-5", fmt.Sprint(int(after.Weekday())), "0,6")
	if dom == "?" && dow == "?" {
		dow = "*"
	}
	fields := []string{minute, hour, dom, "*", dow}
	if rng.IntN(4) == 0 {
		fields = append([]string{pick("0", "30", "*/20", "59")}, fields...)
	}
	if rng.IntN(20) == 0 {
		if wild {
			return "@hourly"
		}
		return "@daily"
	}
	return strings.Join(fields, " ")
}

// TestCron_NextZonesProperty checks Next against refFirings around the offset changes of
// 2000 to 2030 in every zone of time/tzdata: for random expressions with fixed and
// wildcard hours, walking Next gives exactly the reference firings (none skipped, none
// repeated), and Next from random instants just before, at and after a change returns the
// first reference firing strictly after it. Zones with the same changes are tested once.
func TestCron_NextZonesProperty(t *testing.T) {
	t.Parallel()
	transitionsPerZone, exprsPerTransition := 10, 6
	if raceEnabled || testing.Short() {
		transitionsPerZone, exprsPerTransition = 3, 4
	}
	const startsPerExpr = 24
	from := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)

	// Group the zones by their changes in [from, to).
	type zone struct {
		names []string
		trs   []tzTransition
	}
	bySig := make(map[string]*zone)
	var sigs []string
	for _, name := range readTZZones(t) {
		loc, err := time.LoadLocation(name)
		require.NoError(t, err, name)
		trs := tzTransitions(loc, from.Add(-48*time.Hour), to)
		if len(trs) == 0 {
			continue
		}
		for _, tr := range trs {
			require.Zero(t, tr.at%60, "%s: change at %s is not on a minute", name, time.Unix(tr.at, 0).UTC())
			require.Zero(t, tr.after%60, "%s: offset %d is not whole minutes", name, tr.after)
		}
		sig := fmt.Sprint(trs)
		if z, ok := bySig[sig]; ok {
			z.names = append(z.names, name)
			continue
		}
		bySig[sig] = &zone{names: []string{name}, trs: trs}
		sigs = append(sigs, sig)
	}
	require.Greater(t, len(sigs), 100, "too few zones with offset changes: is time/tzdata linked?")

	// The reference must show each DST rule at work, or the test proves nothing.
	var gapFirings, repeatedSkipped, bothPasses atomic.Int64

	t.Run("group", func(t *testing.T) {
		for _, sig := range sigs {
			z := bySig[sig]
			name := z.names[0]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				h := fnv.New64a()
				h.Write([]byte(name))
				rng := rand.New(rand.NewPCG(h.Sum64(), 21))
				trs := slices.Clone(z.trs)
				trs = slices.DeleteFunc(trs, func(tr tzTransition) bool { return tr.at < from.Unix() })
				rng.Shuffle(len(trs), func(i, j int) { trs[i], trs[j] = trs[j], trs[i] })
				trs = trs[:min(len(trs), transitionsPerZone)]
				for _, tr := range trs {
					lo, hi := tr.at-4*3600, tr.at+27*3600
					for e := range exprsPerTransition {
						expr := randomCronExpr(rng, tr, e%2 == 1)
						c, err := ParseCron(expr, name)
						require.NoError(t, err)
						want := refFirings(c, lo-26*3600, lo, hi)
						msg := fmt.Sprintf("%s %q around %s (offset %+d -> %+d), zones %v", name, expr,
							time.Unix(tr.at, 0).UTC().Format(time.RFC3339), tr.before, tr.after, z.names)

						// Walking Next gives the reference firings.
						var got []int64
						for u := c.Next(time.Unix(lo-1, 0)); !u.IsZero() && u.Unix() < hi; u = c.Next(u) {
							got = append(got, u.Unix())
						}
						require.Equal(t, fmtUnix(c, want), fmtUnix(c, got), msg)

						// Next from instants near the change.
						starts := []time.Duration{-time.Second, -time.Nanosecond, 0, time.Second, -500 * time.Millisecond,
							-time.Minute, time.Minute, -time.Hour, time.Hour, -time.Minute - time.Second}
						for range startsPerExpr - len(starts) {
							starts = append(starts, time.Duration(rng.Int64N(int64(4*time.Hour)))-2*time.Hour)
						}
						for _, d := range starts {
							after := time.Unix(tr.at, 0).Add(d)
							next := c.Next(after)
							require.True(t, next.After(after), "%s: Next(%s) = %s", msg, after.UTC(), next)
							i, _ := slices.BinarySearch(want, after.Unix()+1)
							if i < len(want) {
								require.Equal(t, time.Unix(want[i], 0).In(c.loc).Format(cronLayout), next.Format(cronLayout),
									"%s: Next(%s)", msg, after.UTC().Format(time.RFC3339Nano))
							} else {
								require.GreaterOrEqual(t, next.Unix(), hi, "%s: Next(%s) = %s", msg, after.UTC(), next)
							}
						}

						// Count the rules the reference exercised.
						switch {
						case tr.after > tr.before && !c.wildHour && slices.Contains(want, tr.at) &&
							!refMinuteMatches(c, tr.at+tr.after):
							gapFirings.Add(1)
						case tr.after < tr.before && c.wildHour:
							for _, f := range want {
								if f >= tr.at && f < tr.at+tr.before-tr.after && slices.Contains(want, f-(tr.before-tr.after)) {
									bothPasses.Add(1)
									break
								}
							}
						case tr.after < tr.before:
							for u := tr.at; u < tr.at+tr.before-tr.after; u += 60 {
								if refMinuteMatches(c, u+tr.after) && !slices.Contains(want, u) &&
									slices.Contains(want, u-(tr.before-tr.after)) {
									repeatedSkipped.Add(1)
									break
								}
							}
						}
					}
				}
			})
		}
	})
	t.Logf("%d distinct zones; reference cases: %d gap firings, %d repeated hours fired once, %d wildcard both passes",
		len(sigs), gapFirings.Load(), repeatedSkipped.Load(), bothPasses.Load())
	require.Positive(t, gapFirings.Load())
	require.Positive(t, repeatedSkipped.Load())
	require.Positive(t, bothPasses.Load())
}

func fmtUnix(c *Cron, us []int64) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = time.Unix(u, 0).In(c.loc).Format(cronLayout)
	}
	return out
}
