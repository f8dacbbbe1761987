package job

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorhill/cronexpr"
)

// Cron is a parsed cron expression bound to an IANA time zone. A Cron is immutable and safe
// for concurrent use.
//
// Accepted forms are 5 fields (minute hour day-of-month month day-of-week), 6 fields with a
// leading seconds field (second minute hour day-of-month month day-of-week) and the macros
// @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly. A field is a list of
// "*", a value, a range "a-b", or a step "*/n", "a-b/n", "a/n". Months and days of week may
// be given by name (jan, january, mon, monday, case-insensitive); day-of-week 7 is Sunday;
// "?" means "*" in the day fields. When both day-of-month and day-of-week are restricted
// (not "*" or "?"), a day matches if either matches.
//
// Occurrences are computed on the wall clock of the zone and mapped to instants with ISC
// cron's daylight-saving rules:
//
//   - An expression whose hour field starts with "*" (including @hourly) follows elapsed
//     time: a wall time that does not exist (spring forward) is skipped, and a wall time
//     that occurs twice (fall back) fires twice.
//   - Any other expression is a fixed-hour one: it fires once per matching wall time. A wall
//     time that does not exist fires at the first instant after the jump (several
//     nonexistent times in one jump fire once); a wall time that occurs twice fires on its
//     first occurrence only.
type Cron struct {
	expr string
	loc  *time.Location

	sec, min uint64 // bits 0-59
	hour     uint64 // bits 0-23
	dom      uint64 // bits 1-31
	month    uint64 // bits 1-12
	dow      uint64 // bits 0-6, 0 is Sunday
	// dowDays[w] holds the days of month (bits 1-31) whose weekday is in the day-of-week
	// field, for a month whose first day is weekday w.
	dowDays [7]uint64

	domStar, dowStar bool // the field has a "*" (or "?") element
	wildHour         bool // the hour field starts with "*": follow elapsed time across DST
}

// cronHorizon is how far past `after` Next looks for an occurrence: at least 5 years.
const cronHorizon = (5*366 + 2) * 86400

var cronMacros = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

type cronField struct {
	name     string
	min, max int // accepted values; for day-of-week 7 is accepted and means 0
	stepMax  int
	names    map[string]int
	question bool // "?" is accepted as "*"
}

var (
	cronSecond = cronField{name: "second", min: 0, max: 59, stepMax: 59}
	cronMinute = cronField{name: "minute", min: 0, max: 59, stepMax: 59}
	cronHour   = cronField{name: "hour", min: 0, max: 23, stepMax: 23}
	cronDom    = cronField{name: "day-of-month", min: 1, max: 31, stepMax: 31, question: true}
	cronMonth  = cronField{name: "month", min: 1, max: 12, stepMax: 12, names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
		"january": 1, "february": 2, "march": 3, "april": 4, "june": 6, "july": 7,
		"august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
	}}
	cronDow = cronField{name: "day-of-week", min: 0, max: 7, stepMax: 6, question: true, names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
		"sunday": 0, "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4, "friday": 5, "saturday": 6,
	}}
)

// ParseCron parses expr in the time zone tz ("" means UTC; "Local" is refused). Errors are
// plain errors whose text names what is wrong, e.g.
// `cron "61 * * * *": minute field: value 61 out of range (0-59)` or
// `unknown time zone "Mars/Base"`.
func ParseCron(expr, tz string) (*Cron, error) {
	loc, err := cronLocation(tz)
	if err != nil {
		return nil, err
	}
	expr = strings.TrimSpace(expr)
	c := &Cron{expr: expr, loc: loc}
	if err := c.parse(expr); err != nil {
		return nil, fmt.Errorf("cron %q: %w", expr, err)
	}
	return c, nil
}

func cronLocation(tz string) (*time.Location, error) {
	switch tz {
	case "":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("time zone %q is not allowed: use an IANA name such as \"Europe/Paris\"", tz)
	}
	if loc, ok := cronLocations.Load(tz); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", tz)
	}
	cronLocations.Store(tz, loc)
	return loc, nil
}

// cronLocations caches loaded zones by name: time.LoadLocation reads and parses the zone
// file on every call.
var cronLocations sync.Map

func (c *Cron) parse(expr string) error {
	if expr == "" {
		return errors.New("empty expression")
	}
	fields := strings.Fields(expr)
	if strings.HasPrefix(fields[0], "@") {
		six, ok := cronMacros[fields[0]]
		if !ok {
			return fmt.Errorf("unsupported macro %q (supported: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)", fields[0])
		}
		if len(fields) > 1 {
			return fmt.Errorf("unexpected text after macro %s", fields[0])
		}
		fields = strings.Fields(six)
	}
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return fmt.Errorf("expected 5 fields (minute hour day-of-month month day-of-week) or 6 fields (second minute ... day-of-week), got %d", len(fields))
	}

	var err error
	if c.sec, _, err = cronSecond.parse(fields[0]); err != nil {
		return err
	}
	if c.min, _, err = cronMinute.parse(fields[1]); err != nil {
		return err
	}
	if c.hour, _, err = cronHour.parse(fields[2]); err != nil {
		return err
	}
	if c.dom, c.domStar, err = cronDom.parse(fields[3]); err != nil {
		return err
	}
	if c.month, _, err = cronMonth.parse(fields[4]); err != nil {
		return err
	}
	if c.dow, c.dowStar, err = cronDow.parse(fields[5]); err != nil {
		return err
	}
	c.wildHour = strings.HasPrefix(fields[2], "*")
	for first := range 7 {
		for d := 1; d <= 31; d++ {
			if c.dow&(1<<((first+d-1)%7)) != 0 {
				c.dowDays[first] |= 1 << d
			}
		}
	}

	// A restricted day-of-month with "*" day-of-week must name a day that some selected
	// month has, or the expression never fires.
	if !c.domStar && c.dowStar {
		ok := false
		for m := 1; m <= 12 && !ok; m++ {
			if c.month&(1<<m) != 0 && c.dom&(1<<(cronMaxDays(m)+1)-1) != 0 {
				ok = true
			}
		}
		if !ok {
			return errors.New("day-of-month field: no selected day exists in the selected month(s), the expression never fires")
		}
	}

	// Cross-check with cronexpr, whose 7-field form is second minute hour day-of-month
	// month day-of-week year. Every field was validated above, so this only guards against
	// accepting a syntax cronexpr would not.
	if _, err := cronexpr.Parse(strings.Join(fields, " ") + " *"); err != nil {
		return err
	}
	return nil
}

// parse parses one field into a bit set of values. star reports a field with a "*" (or
// "?" where allowed) element, as cronexpr does.
func (f *cronField) parse(s string) (set uint64, star bool, err error) {
	for part := range strings.SplitSeq(s, ",") {
		if part == "*" || (f.question && part == "?") {
			star = true
		}
		if part == "" {
			return 0, false, fmt.Errorf("%s field: empty element in list %q", f.name, s)
		}
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, ok := cronNumber(stepText)
			if !ok || (len(stepText) > 2 && n >= 1 && n <= f.stepMax) {
				return 0, false, fmt.Errorf("%s field: invalid step %q in %q", f.name, stepText, part)
			}
			if n < 1 || n > f.stepMax {
				return 0, false, fmt.Errorf("%s field: step %d out of range (1-%d)", f.name, n, f.stepMax)
			}
			step = n
		}
		hi := f.max
		if f.max == 7 { // day-of-week: "*" and "a/n" run to Saturday
			hi = 6
		}
		var lo int
		switch {
		case rng == "*":
			lo = f.min
		case rng == "?" && f.question && !hasStep:
			lo = f.min
		default:
			a, b, isRange := strings.Cut(rng, "-")
			if lo, err = f.value(a); err != nil {
				return 0, false, err
			}
			if isRange {
				if hi, err = f.value(b); err != nil {
					return 0, false, err
				}
				if lo > hi {
					return 0, false, fmt.Errorf("%s field: range %q starts after it ends", f.name, rng)
				}
			} else if !hasStep {
				hi = lo
			} else if lo > hi { // day-of-week "7/n"
				lo = 0
			}
		}
		for v := lo; v <= hi; v += step {
			if f.max == 7 {
				set |= 1 << (v % 7) // day-of-week 7 is Sunday
			} else {
				set |= 1 << v
			}
		}
	}
	return set, star, nil
}

func (f *cronField) value(s string) (int, error) {
	if n, ok := cronNumber(s); ok {
		if n < f.min || n > f.max {
			return 0, fmt.Errorf("%s field: value %d out of range (%d-%d)", f.name, n, f.min, f.max)
		}
		if len(s) > 2 {
			return 0, fmt.Errorf("%s field: invalid value %q", f.name, s)
		}
		return n, nil
	}
	if n, ok := f.names[strings.ToLower(s)]; ok {
		return n, nil
	}
	if s == "" {
		return 0, fmt.Errorf("%s field: missing value", f.name)
	}
	if up := strings.ToUpper(s); f.question && (strings.Contains(up, "#") || strings.Trim(up, "0123456789") == "L" ||
		strings.Trim(up, "0123456789") == "W" || up == "LW") {
		return 0, fmt.Errorf("%s field: %q: L, W and # are not supported", f.name, s)
	}
	return 0, fmt.Errorf("%s field: invalid value %q", f.name, s)
}

// cronNumber parses a run of decimal digits (at most 9).
func cronNumber(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

func cronMaxDays(month int) int {
	switch month {
	case 2:
		return 29
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// Expr returns the expression as given to ParseCron, without surrounding space.
func (c *Cron) Expr() string { return c.expr }

// Location returns the time zone of the expression.
func (c *Cron) Location() *time.Location { return c.loc }

// String returns the expression and the zone name, e.g. "0 9 * * 1-5 Europe/Paris".
func (c *Cron) String() string { return c.expr + " " + c.loc.String() }

// cronPeriod is a span of instants [start, end) (unix seconds) during which the zone's UTC
// offset is off seconds; start is math.MinInt64 and end math.MaxInt64 when unbounded.
type cronPeriod struct {
	start, end, off int64
}

func (c *Cron) periodAt(u int64) cronPeriod {
	if c.loc == time.UTC {
		return cronPeriod{start: math.MinInt64, end: math.MaxInt64}
	}
	t := time.Unix(u, 0).In(c.loc)
	_, off := t.Zone()
	start, end := t.ZoneBounds()
	p := cronPeriod{start: math.MinInt64, end: math.MaxInt64, off: int64(off)}
	if !start.IsZero() {
		p.start = start.Unix()
	}
	if !end.IsZero() {
		p.end = end.Unix()
	}
	if p.end <= u {
		// Past the zone's last listed transition, the time package computes bounds per
		// UTC year from the zone's rule, and in a leap year the bounds it reports for
		// December 31 end before that day. The offset holds until the next UTC year.
		p.end = time.Date(time.Unix(u, 0).UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	}
	p.start = min(p.start, u)
	return p
}

// repeatedUntil returns the exclusive end of the wall-clock range that the periods before
// p (looking back up to 2 days) already covered, or math.MinInt64. When it is after the
// wall time p starts at, the clocks went back and those wall times repeat; when it is
// before, the clocks jumped forward and the wall times in between never occur.
func (c *Cron) repeatedUntil(p cronPeriod) int64 {
	until := int64(math.MinInt64)
	r := p
	for i := 0; i < 4 && r.start != math.MinInt64 && r.start > p.start-2*86400; i++ {
		r = c.periodAt(r.start - 1)
		until = max(until, r.end+r.off)
	}
	return until
}

// Next returns the first firing time strictly after `after` (any location; the result is
// in the Cron's zone). It never returns a time at or before `after`. It returns the zero
// Time only if there is no firing time within 5 years after `after`.
//
// The firing times form a fixed set of instants (see Cron for the daylight-saving rules),
// so calling Next repeatedly walks them in order, without repeats.
func (c *Cron) Next(after time.Time) time.Time {
	a := after.Unix()
	if a > math.MaxInt64/2 || a < math.MinInt64/2 {
		return time.Time{}
	}
	from := a + 1 // firing times are whole seconds
	horizon := from + cronHorizon
	m := cronMatcher{c: c, maxW: horizon + cronMaxOffset}
	p := c.periodAt(from)
	// Walk the zone's offset periods. Within a period, wall clock and instants map one to
	// one, so the first matching wall time gives the earliest firing time of the period.
	for i := 0; i < 10000 && from <= horizon; i++ {
		wFrom := from + p.off
		if !c.wildHour {
			// A fixed-hour expression already fired for wall times that occurred before
			// p, and fires the wall times that the clocks skipped on entering p once, at
			// p.start. That firing time belongs to p: it counts even when the search
			// starts at the jump itself (after is the last second before it).
			seen := c.repeatedUntil(p)
			if p.start >= from && seen != math.MinInt64 && seen < p.start+p.off {
				if w, ok := m.next(seen); ok && w < p.start+p.off {
					return time.Unix(p.start, 0).In(c.loc)
				}
			}
			wFrom = max(wFrom, seen)
		}
		w, ok := m.next(wFrom)
		if !ok {
			break
		}
		if p.end == math.MaxInt64 || w < p.end+p.off {
			return time.Unix(w-p.off, 0).In(c.loc)
		}
		p, from = c.periodAt(p.end), p.end
	}
	return time.Time{}
}

// cronMaxOffset bounds the UTC offset of any zone.
const cronMaxOffset = 26 * 3600

// cronMatcher remembers the last nextWall search, so that Next does not search again
// for each zone period it skips.
type cronMatcher struct {
	c           *Cron
	maxW        int64
	searched    bool
	from, found int64 // the search [from, maxW] found found, or nothing if !ok
	ok          bool
}

func (m *cronMatcher) next(w int64) (int64, bool) {
	if !m.searched || w < m.from || (m.ok && w > m.found) {
		m.found, m.ok = m.c.nextWall(w, m.maxW)
		m.from, m.searched = w, true
	}
	return m.found, m.ok
}

// nextWall returns the first matching wall time in [w, maxW], both counted in seconds
// since 1970-01-01 00:00:00 of the wall clock (that is, the wall clock read as UTC).
func (c *Cron) nextWall(w, maxW int64) (int64, bool) {
	t := time.Unix(w, 0).UTC()
	year, mon, d := t.Date()
	h, mi, s := t.Clock()
	mo := int(mon)
	maxYear := time.Unix(maxW, 0).UTC().Year()
	for year <= maxYear {
		if c.month&(1<<mo) == 0 {
			if n := cronNextBit(c.month, mo); n >= 0 {
				mo = n
			} else {
				year, mo, d, h, mi, s = year+1, 1, 1, 0, 0, 0
				continue
			}
			d, h, mi, s = 1, 0, 0, 0
		}
		if days := c.days(year, mo); days&(1<<d) == 0 {
			n := cronNextBit(days, d)
			if n < 0 {
				mo, d, h, mi, s = mo+1, 1, 0, 0, 0
				if mo > 12 {
					year, mo = year+1, 1
				}
				continue
			}
			d, h, mi, s = n, 0, 0, 0
		}
		if c.hour&(1<<h) == 0 {
			n := cronNextBit(c.hour, h)
			if n < 0 {
				d, h, mi, s = d+1, 0, 0, 0
				continue
			}
			h, mi, s = n, 0, 0
		}
		if c.min&(1<<mi) == 0 {
			n := cronNextBit(c.min, mi)
			if n < 0 {
				h, mi, s = h+1, 0, 0
				continue
			}
			mi, s = n, 0
		}
		if c.sec&(1<<s) == 0 {
			n := cronNextBit(c.sec, s)
			if n < 0 {
				mi, s = mi+1, 0
				continue
			}
			s = n
		}
		r := cronDaysFromCivil(year, mo, d)*86400 + int64(h*3600+mi*60+s)
		return r, r <= maxW
	}
	return 0, false
}

// days returns the matching days (bits 1-31) of a month.
func (c *Cron) days(year, month int) uint64 {
	n := cronMaxDays(month)
	if month == 2 && !(year%4 == 0 && (year%100 != 0 || year%400 == 0)) {
		n = 28
	}
	valid := uint64(1)<<(n+1) - 2
	first := (cronDaysFromCivil(year, month, 1)%7 + 11) % 7 // 1970-01-01 was a Thursday
	var set uint64
	switch {
	case c.domStar && c.dowStar:
		set = valid
	case c.dowStar:
		set = c.dom
	case c.domStar:
		set = c.dowDays[first]
	default:
		set = c.dom | c.dowDays[first]
	}
	return set & valid
}

// cronNextBit returns the lowest set bit of set at or above from, or -1.
func cronNextBit(set uint64, from int) int {
	if from >= 64 {
		return -1
	}
	set &= ^uint64(0) << from
	if set == 0 {
		return -1
	}
	return bits.TrailingZeros64(set)
}

// cronDaysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian date.
func cronDaysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}
