package job

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // the DST tests must not depend on the host's zone files

	"github.com/stretchr/testify/require"
)

// cronLayout is RFC 3339 with an explicit numeric offset (never "Z").
const cronLayout = "2006-01-02T15:04:05-07:00"

func mustCron(t testing.TB, expr, tz string) *Cron {
	t.Helper()
	c, err := ParseCron(expr, tz)
	require.NoError(t, err)
	return c
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return ts
}

// walk calls Next n times from start and formats the instants.
func walk(c *Cron, start time.Time, n int) []string {
	var out []string
	t := start
	for range n {
		t = c.Next(t)
		if t.IsZero() {
			out = append(out, "zero")
			break
		}
		out = append(out, t.Format(cronLayout))
	}
	return out
}

func TestParseCron_Valid(t *testing.T) {
	t.Parallel()
	// Sunday 2026-03-01 12:00:00 UTC.
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		expr string
		want string // first firing after start
	}{
		{"0 9 * * 1-5", "2026-03-02T09:00:00+00:00"},
		{"30 0 9 * * mon-fri", "2026-03-02T09:00:30+00:00"},
		{"*/20 * * * * *", "2026-03-01T12:00:20+00:00"},
		{"0 */6 * * *", "2026-03-01T18:00:00+00:00"},
		{"15/20 * * * *", "2026-03-01T12:15:00+00:00"},
		{"0-10/5,50 13 * * *", "2026-03-01T13:00:00+00:00"},
		{"0 0 1,15 * *", "2026-03-15T00:00:00+00:00"},
		{"0 12 * JAN-Mar sun", "2026-03-08T12:00:00+00:00"},
		{"0 12 * * 7", "2026-03-08T12:00:00+00:00"},
		{"0 0 * * 5-7", "2026-03-06T00:00:00+00:00"},
		{"0 0 13 * 5", "2026-03-06T00:00:00+00:00"}, // day-of-month OR day-of-week
		{"0 0 ? * monday", "2026-03-02T00:00:00+00:00"},
		{"0 0 29 2 *", "2028-02-29T00:00:00+00:00"},
		{"0 0 31 * *", "2026-03-31T00:00:00+00:00"},
		{"0 0 1 january,july *", "2026-07-01T00:00:00+00:00"},
		{"00 09 * * *", "2026-03-02T09:00:00+00:00"},
		{"  0 9 * * *  ", "2026-03-02T09:00:00+00:00"},
		{"@yearly", "2027-01-01T00:00:00+00:00"},
		{"@annually", "2027-01-01T00:00:00+00:00"},
		{"@monthly", "2026-04-01T00:00:00+00:00"},
		{"@weekly", "2026-03-08T00:00:00+00:00"},
		{"@daily", "2026-03-02T00:00:00+00:00"},
		{"@midnight", "2026-03-02T00:00:00+00:00"},
		{"@hourly", "2026-03-01T13:00:00+00:00"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			t.Parallel()
			c := mustCron(t, tt.expr, "")
			require.Equal(t, time.UTC, c.Location())
			require.Equal(t, tt.want, c.Next(start).Format(cronLayout))
		})
	}
}

func TestCron_Accessors(t *testing.T) {
	t.Parallel()
	c := mustCron(t, " 0 9 * * 1-5 ", "Europe/Paris")
	require.Equal(t, "0 9 * * 1-5", c.Expr())
	require.Equal(t, "Europe/Paris", c.Location().String())
	require.Equal(t, "0 9 * * 1-5 Europe/Paris", c.String())

	c = mustCron(t, "@daily", "")
	require.Equal(t, "@daily", c.Expr())
	require.Equal(t, "@daily UTC", c.String())
}

func TestParseCron_Invalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr, tz string
		want     string // substring of the error
	}{
		{"", "", `cron "": empty expression`},
		{"   ", "", "empty expression"},
		{"61 * * * *", "", `cron "61 * * * *": minute field: value 61 out of range`},
		{"* 24 * * *", "", "hour field: value 24 out of range (0-23)"},
		{"* * 0 * *", "", "day-of-month field: value 0 out of range (1-31)"},
		{"* * 32 * *", "", "day-of-month field: value 32 out of range"},
		{"* * * 13 *", "", "month field: value 13 out of range (1-12)"},
		{"* * * 0 *", "", "month field: value 0 out of range"},
		{"* * * * 8", "", "day-of-week field: value 8 out of range (0-7)"},
		{"60 * * * * *", "", "second field: value 60 out of range (0-59)"},
		{"0 60 * * * *", "", "minute field: value 60 out of range"},
		{"100 * * * *", "", "minute field: value 100 out of range"},
		{"007 * * * *", "", `minute field: invalid value "007"`},
		{"* * * *", "", "expected 5 fields"},
		{"0 0 0 * * * 2026", "", "got 7"},
		{"*", "", "got 1"},
		{"@reboot", "", `unsupported macro "@reboot"`},
		{"@every 5m", "", `unsupported macro "@every"`},
		{"@DAILY", "", `unsupported macro "@DAILY"`},
		{"@daily 0", "", "unexpected text after macro @daily"},
		{"*/0 * * * *", "", "minute field: step 0 out of range (1-59)"},
		{"*/60 * * * *", "", "minute field: step 60 out of range"},
		{"0 */24 * * *", "", "hour field: step 24 out of range (1-23)"},
		{"*/x * * * *", "", `minute field: invalid step "x"`},
		{"5-1 * * * *", "", `minute field: range "5-1" starts after it ends`},
		{"0 0 * * fri-mon", "", `day-of-week field: range "fri-mon" starts after it ends`},
		{"1,,2 * * * *", "", "minute field: empty element"},
		{"1, * * * *", "", "minute field: empty element"},
		{"a * * * *", "", `minute field: invalid value "a"`},
		{"1- * * * *", "", "minute field: missing value"},
		{"-1 * * * *", "", "minute field: missing value"},
		{"? * * * *", "", `minute field: invalid value "?"`},
		{"0 0 * foo *", "", `month field: invalid value "foo"`},
		{"0 0 * * funday", "", `day-of-week field: invalid value "funday"`},
		{"0 0 * mon *", "", `month field: invalid value "mon"`},
		{"0 0 L * *", "", `day-of-month field: "L": L, W and # are not supported`},
		{"0 0 15W * *", "", "L, W and # are not supported"},
		{"0 0 * * 5#3", "", "L, W and # are not supported"},
		{"0 0 * * 5L", "", "L, W and # are not supported"},
		{"0 0 30 2 *", "", "never fires"},
		{"0 0 31 4,6,9,11 *", "", "never fires"},
		{"0 9 * * *", "Mars/Base", `unknown time zone "Mars/Base"`},
		{"0 9 * * *", "america/new_york", `unknown time zone "america/new_york"`},
		{"0 9 * * *", "Local", `time zone "Local" is not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.expr+"|"+tt.tz, func(t *testing.T) {
			t.Parallel()
			c, err := ParseCron(tt.expr, tt.tz)
			require.Nil(t, c)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestCron_NextDST walks Next across the 2026 transitions in New York, London and Lord
// Howe, and the 2018 midnight transitions in São Paulo.
func TestCron_NextDST(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, tz, expr, start string
		want                  []string
	}{
		// America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT.
		{"NY spring fixed", "America/New_York", "30 2 * * *", "2026-03-06T12:00:00-05:00", []string{
			"2026-03-07T02:30:00-05:00",
			"2026-03-08T03:00:00-04:00", // 02:30 does not exist: right after the jump
			"2026-03-09T02:30:00-04:00",
			"2026-03-10T02:30:00-04:00",
		}},
		{"NY spring fixed hour several in gap", "America/New_York", "*/15 2 * * *", "2026-03-07T02:50:00-05:00", []string{
			"2026-03-08T03:00:00-04:00", // 02:00, 02:15, 02:30, 02:45 fire once
			"2026-03-09T02:00:00-04:00",
			"2026-03-09T02:15:00-04:00",
		}},
		{"NY spring fixed with seconds", "America/New_York", "30 30 2 * * *", "2026-03-07T12:00:00-05:00", []string{
			"2026-03-08T03:00:00-04:00",
			"2026-03-09T02:30:30-04:00",
		}},
		{"NY spring hourly", "America/New_York", "0 * * * *", "2026-03-08T00:30:00-05:00", []string{
			"2026-03-08T01:00:00-05:00",
			"2026-03-08T03:00:00-04:00",
			"2026-03-08T04:00:00-04:00",
		}},
		{"NY spring every 15 min", "America/New_York", "*/15 * * * *", "2026-03-08T01:20:00-05:00", []string{
			"2026-03-08T01:30:00-05:00",
			"2026-03-08T01:45:00-05:00",
			"2026-03-08T03:00:00-04:00",
			"2026-03-08T03:15:00-04:00",
		}},
		// America/New_York: 2026-11-01 02:00 EDT -> 01:00 EST.
		{"NY fall fixed", "America/New_York", "30 1 * * *", "2026-10-31T12:00:00-04:00", []string{
			"2026-11-01T01:30:00-04:00", // first pass only
			"2026-11-02T01:30:00-05:00",
			"2026-11-03T01:30:00-05:00",
		}},
		{"NY fall fixed 2:30", "America/New_York", "30 2 * * *", "2026-10-31T12:00:00-04:00", []string{
			"2026-11-01T02:30:00-05:00",
			"2026-11-02T02:30:00-05:00",
		}},
		{"NY fall hourly", "America/New_York", "0 * * * *", "2026-11-01T00:30:00-04:00", []string{
			"2026-11-01T01:00:00-04:00",
			"2026-11-01T01:00:00-05:00",
			"2026-11-01T02:00:00-05:00",
			"2026-11-01T03:00:00-05:00",
		}},
		{"NY fall every 15 min", "America/New_York", "*/15 * * * *", "2026-11-01T00:50:00-04:00", []string{
			"2026-11-01T01:00:00-04:00",
			"2026-11-01T01:15:00-04:00",
			"2026-11-01T01:30:00-04:00",
			"2026-11-01T01:45:00-04:00",
			"2026-11-01T01:00:00-05:00",
			"2026-11-01T01:15:00-05:00",
			"2026-11-01T01:30:00-05:00",
			"2026-11-01T01:45:00-05:00",
			"2026-11-01T02:00:00-05:00",
		}},
		{"NY fall fixed from second pass", "America/New_York", "30 1 * * *", "2026-11-01T01:10:00-05:00", []string{
			"2026-11-02T01:30:00-05:00",
		}},
		{"NY fall every 15 min from second pass", "America/New_York", "*/15 * * * *", "2026-11-01T01:40:00-05:00", []string{
			"2026-11-01T01:45:00-05:00",
			"2026-11-01T02:00:00-05:00",
		}},
		// Europe/London: 2026-03-29 01:00 GMT -> 02:00 BST.
		{"London spring fixed", "Europe/London", "30 1 * * *", "2026-03-27T12:00:00+00:00", []string{
			"2026-03-28T01:30:00+00:00",
			"2026-03-29T02:00:00+01:00",
			"2026-03-30T01:30:00+01:00",
		}},
		{"London spring hourly", "Europe/London", "0 * * * *", "2026-03-28T23:30:00+00:00", []string{
			"2026-03-29T00:00:00+00:00",
			"2026-03-29T02:00:00+01:00",
			"2026-03-29T03:00:00+01:00",
		}},
		{"London spring every 15 min", "Europe/London", "*/15 * * * *", "2026-03-29T00:40:00+00:00", []string{
			"2026-03-29T00:45:00+00:00",
			"2026-03-29T02:00:00+01:00",
			"2026-03-29T02:15:00+01:00",
		}},
		// Europe/London: 2026-10-25 02:00 BST -> 01:00 GMT.
		{"London fall fixed", "Europe/London", "30 1 * * *", "2026-10-24T12:00:00+01:00", []string{
			"2026-10-25T01:30:00+01:00",
			"2026-10-26T01:30:00+00:00",
		}},
		{"London fall hourly", "Europe/London", "0 * * * *", "2026-10-24T23:30:00+01:00", []string{
			"2026-10-25T00:00:00+01:00",
			"2026-10-25T01:00:00+01:00",
			"2026-10-25T01:00:00+00:00",
			"2026-10-25T02:00:00+00:00",
		}},
		{"London fall every 15 min", "Europe/London", "*/15 * * * *", "2026-10-25T00:50:00+01:00", []string{
			"2026-10-25T01:00:00+01:00",
			"2026-10-25T01:15:00+01:00",
			"2026-10-25T01:30:00+01:00",
			"2026-10-25T01:45:00+01:00",
			"2026-10-25T01:00:00+00:00",
			"2026-10-25T01:15:00+00:00",
			"2026-10-25T01:30:00+00:00",
			"2026-10-25T01:45:00+00:00",
			"2026-10-25T02:00:00+00:00",
		}},
		// Australia/Lord_Howe: 2026-04-05 02:00 +11:00 -> 01:30 +10:30.
		{"Lord Howe fall fixed", "Australia/Lord_Howe", "30 1 * * *", "2026-04-04T12:00:00+11:00", []string{
			"2026-04-05T01:30:00+11:00",
			"2026-04-06T01:30:00+10:30",
		}},
		{"Lord Howe fall hourly", "Australia/Lord_Howe", "0 * * * *", "2026-04-05T00:30:00+11:00", []string{
			"2026-04-05T01:00:00+11:00",
			"2026-04-05T02:00:00+10:30",
			"2026-04-05T03:00:00+10:30",
		}},
		{"Lord Howe fall every 15 min", "Australia/Lord_Howe", "*/15 * * * *", "2026-04-05T00:50:00+11:00", []string{
			"2026-04-05T01:00:00+11:00",
			"2026-04-05T01:15:00+11:00",
			"2026-04-05T01:30:00+11:00",
			"2026-04-05T01:45:00+11:00",
			"2026-04-05T01:30:00+10:30",
			"2026-04-05T01:45:00+10:30",
			"2026-04-05T02:00:00+10:30",
		}},
		// Australia/Lord_Howe: 2026-10-04 02:00 +10:30 -> 02:30 +11:00.
		{"Lord Howe spring fixed in gap", "Australia/Lord_Howe", "15 2 * * *", "2026-10-03T12:00:00+10:30", []string{
			"2026-10-04T02:30:00+11:00",
			"2026-10-05T02:15:00+11:00",
		}},
		{"Lord Howe spring fixed after gap", "Australia/Lord_Howe", "30 2 * * *", "2026-10-03T12:00:00+10:30", []string{
			"2026-10-04T02:30:00+11:00",
			"2026-10-05T02:30:00+11:00",
		}},
		{"Lord Howe spring hourly", "Australia/Lord_Howe", "0 * * * *", "2026-10-04T00:30:00+10:30", []string{
			"2026-10-04T01:00:00+10:30",
			"2026-10-04T03:00:00+11:00",
			"2026-10-04T04:00:00+11:00",
		}},
		{"Lord Howe spring every 15 min", "Australia/Lord_Howe", "*/15 * * * *", "2026-10-04T01:20:00+10:30", []string{
			"2026-10-04T01:30:00+10:30",
			"2026-10-04T01:45:00+10:30",
			"2026-10-04T02:30:00+11:00",
			"2026-10-04T02:45:00+11:00",
			"2026-10-04T03:00:00+11:00",
		}},
		// America/New_York in 2040, past the zone file's transitions: 2040-03-11 and
		// 2040-11-04 come from the zone's rule.
		{"NY 2040 spring fixed", "America/New_York", "30 2 * * *", "2040-03-10T12:00:00-05:00", []string{
			"2040-03-11T03:00:00-04:00",
			"2040-03-12T02:30:00-04:00",
		}},
		{"NY 2040 fall every 15 min", "America/New_York", "*/15 * * * *", "2040-11-04T01:40:00-04:00", []string{
			"2040-11-04T01:45:00-04:00",
			"2040-11-04T01:00:00-05:00",
		}},
		{"NY 2040 turn of the year", "America/New_York", "0 0 * * *", "2040-12-30T12:00:00-05:00", []string{
			"2040-12-31T00:00:00-05:00",
			"2041-01-01T00:00:00-05:00",
			"2041-01-02T00:00:00-05:00",
		}},
		// America/Sao_Paulo: 2018-11-04 00:00 -03:00 -> 01:00 -02:00.
		{"Sao Paulo spring midnight", "America/Sao_Paulo", "0 0 * * *", "2018-11-02T12:00:00-03:00", []string{
			"2018-11-03T00:00:00-03:00",
			"2018-11-04T01:00:00-02:00",
			"2018-11-05T00:00:00-02:00",
		}},
		{"Sao Paulo spring daily macro", "America/Sao_Paulo", "@daily", "2018-11-03T12:00:00-03:00", []string{
			"2018-11-04T01:00:00-02:00",
			"2018-11-05T00:00:00-02:00",
		}},
		{"Sao Paulo spring hourly", "America/Sao_Paulo", "0 * * * *", "2018-11-03T22:30:00-03:00", []string{
			"2018-11-03T23:00:00-03:00",
			"2018-11-04T01:00:00-02:00",
			"2018-11-04T02:00:00-02:00",
		}},
		{"Sao Paulo spring every 15 min", "America/Sao_Paulo", "*/15 * * * *", "2018-11-03T23:20:00-03:00", []string{
			"2018-11-03T23:30:00-03:00",
			"2018-11-03T23:45:00-03:00",
			"2018-11-04T01:00:00-02:00",
			"2018-11-04T01:15:00-02:00",
		}},
		// America/Sao_Paulo: 2018-02-18 00:00 -02:00 -> 2018-02-17 23:00 -03:00.
		{"Sao Paulo fall midnight", "America/Sao_Paulo", "0 0 * * *", "2018-02-16T12:00:00-02:00", []string{
			"2018-02-17T00:00:00-02:00",
			"2018-02-18T00:00:00-03:00",
			"2018-02-19T00:00:00-03:00",
		}},
		{"Sao Paulo fall repeated hour fixed", "America/Sao_Paulo", "30 23 * * *", "2018-02-16T12:00:00-02:00", []string{
			"2018-02-16T23:30:00-02:00",
			"2018-02-17T23:30:00-02:00", // first pass only
			"2018-02-18T23:30:00-03:00",
		}},
		{"Sao Paulo fall hourly", "America/Sao_Paulo", "0 * * * *", "2018-02-17T21:30:00-02:00", []string{
			"2018-02-17T22:00:00-02:00",
			"2018-02-17T23:00:00-02:00",
			"2018-02-17T23:00:00-03:00",
			"2018-02-18T00:00:00-03:00",
		}},
		{"Sao Paulo fall every 15 min", "America/Sao_Paulo", "*/15 * * * *", "2018-02-17T23:40:00-02:00", []string{
			"2018-02-17T23:45:00-02:00",
			"2018-02-17T23:00:00-03:00",
			"2018-02-17T23:15:00-03:00",
			"2018-02-17T23:30:00-03:00",
			"2018-02-17T23:45:00-03:00",
			"2018-02-18T00:00:00-03:00",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := mustCron(t, tt.expr, tt.tz)
			require.Equal(t, tt.want, walk(c, mustTime(t, tt.start), len(tt.want)))
		})
	}
}

func TestCron_NextSeconds(t *testing.T) {
	t.Parallel()
	c := mustCron(t, "*/10 * * * * *", "Europe/Paris")
	require.Equal(t, []string{
		"2026-06-01T12:00:10+02:00",
		"2026-06-01T12:00:20+02:00",
		"2026-06-01T12:00:30+02:00",
		"2026-06-01T12:00:40+02:00",
		"2026-06-01T12:00:50+02:00",
		"2026-06-01T12:01:00+02:00",
		"2026-06-01T12:01:10+02:00",
	}, walk(c, mustTime(t, "2026-06-01T12:00:05.5+02:00"), 7))
}

func TestCron_NextOnOccurrence(t *testing.T) {
	t.Parallel()
	c := mustCron(t, "0 9 * * *", "Europe/Paris")
	tests := []struct{ after, want string }{
		{"2026-06-01T08:59:59.999+02:00", "2026-06-01T09:00:00+02:00"},
		{"2026-06-01T09:00:00+02:00", "2026-06-02T09:00:00+02:00"},
		{"2026-06-01T09:00:00.000000001+02:00", "2026-06-02T09:00:00+02:00"},
		{"2026-06-01T07:00:00Z", "2026-06-02T09:00:00+02:00"}, // same instant, another zone
		{"2026-06-01T06:59:59Z", "2026-06-01T09:00:00+02:00"},
	}
	for _, tt := range tests {
		after := mustTime(t, tt.after)
		got := c.Next(after)
		require.Equal(t, tt.want, got.Format(cronLayout), "after %s", tt.after)
		require.True(t, got.After(after))
		require.Equal(t, c.Location(), got.Location())
	}
}

func TestCron_NextNoOccurrenceWithin5Years(t *testing.T) {
	t.Parallel()
	c := mustCron(t, "0 0 29 2 *", "America/New_York")
	// 2100 is not a leap year: after 2096-02-29 the next one is 2104-02-29.
	require.True(t, c.Next(time.Date(2096, 3, 1, 0, 0, 0, 0, time.UTC)).IsZero())
	require.Equal(t, "2028-02-29T00:00:00-05:00", c.Next(time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)).Format(cronLayout))
}

// cronTestZones have unusual transitions: 30- and 45-minute offsets, a 2-hour jump
// (Antarctica/Troll), negative DST in the tz source (Europe/Dublin) and midnight jumps.
var cronTestZones = []string{
	"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Sao_Paulo",
	"Pacific/Chatham", "America/St_Johns", "Antarctica/Troll", "Europe/Dublin", "Asia/Kolkata",
	"America/Havana", "Asia/Gaza",
}

var cronTestExprs = []string{
	"* * * * *", "*/15 * * * *", "*/7 * * * *", "0 * * * *", "30 * * * *", "0 */2 * * *",
	"30 2 * * *", "0 0 * * *", "30 1 * * *", "45 0 * * *", "*/15 2 * * *", "* 1 * * *",
	"0,30 1-3 * * *", "0 2 * * 0", "59 23 * * *", "0 0 1 * *", "@hourly", "@daily",
}

// bruteMatches reports whether a wall-clock time (read as UTC) matches c, computed
// directly from the parsed fields.
func bruteMatches(c *Cron, w time.Time) bool {
	if c.sec&(1<<w.Second()) == 0 || c.min&(1<<w.Minute()) == 0 || c.hour&(1<<w.Hour()) == 0 ||
		c.month&(1<<int(w.Month())) == 0 {
		return false
	}
	domOK := c.dom&(1<<w.Day()) != 0
	dowOK := c.dow&(1<<int(w.Weekday())) != 0
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

func wallUTC(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

// bruteFirings simulates ISC cron minute by minute over the instants in (from, to]: a
// wildcard-hour expression fires at every instant whose wall clock matches; a fixed-hour
// one fires at the first instant of each matching wall time, and once at a forward jump
// that skipped a matching wall time. Only for expressions firing at second 0.
func bruteFirings(c *Cron, from, to time.Time) []string {
	var out []string
	for u := from.Truncate(time.Minute).Add(time.Minute); !u.After(to); u = u.Add(time.Minute) {
		lt := u.In(c.loc)
		w := wallUTC(lt)
		_, off := lt.Zone()
		_, prevOff := u.Add(-time.Minute).In(c.loc).Zone()
		fire := false
		if !c.wildHour && off > prevOff {
			// Forward jump at u: walls [wall(u-1m)+1m, wall(u)) were skipped.
			for g := wallUTC(u.Add(-time.Minute).In(c.loc)).Add(time.Minute); g.Before(w); g = g.Add(time.Minute) {
				fire = fire || bruteMatches(c, g)
			}
		}
		if bruteMatches(c, w) {
			first := true
			if !c.wildHour {
				for k := 1; k <= 180; k++ {
					if wallUTC(u.Add(-time.Duration(k) * time.Minute).In(c.loc)).Equal(w) {
						first = false
						break
					}
				}
			}
			fire = fire || first
		}
		if fire {
			out = append(out, lt.Format(cronLayout))
		}
	}
	return out
}

// TestCron_NextMatchesBruteForce compares walking Next with a minute-by-minute simulation
// over two days around every transition of 2026 (2018 for São Paulo) in unusual zones.
func TestCron_NextMatchesBruteForce(t *testing.T) {
	t.Parallel()
	type zoneYear struct {
		tz   string
		year int
	}
	var cases []zoneYear
	for _, tz := range cronTestZones {
		year := 2026
		if tz == "America/Sao_Paulo" {
			year = 2018
		}
		cases = append(cases, zoneYear{tz, year})
	}
	// Years past the zone files' last transition, computed from the zones' rules; 2040 is
	// a leap year (see periodAt).
	cases = append(cases, zoneYear{"America/New_York", 2040}, zoneYear{"Australia/Lord_Howe", 2040})
	for _, zy := range cases {
		tz, year := zy.tz, zy.year
		loc, err := time.LoadLocation(tz)
		require.NoError(t, err)
		var transitions []time.Time
		for t0 := time.Date(year, 1, 1, 0, 0, 0, 0, loc); ; {
			_, end := t0.ZoneBounds()
			if end.IsZero() || end.Year() > year {
				break
			}
			if !end.After(t0) { // the time package's leap-year quirk, see periodAt
				end = t0.Add(24 * time.Hour)
			}
			_, before := end.Add(-time.Second).Zone()
			if _, after := end.Zone(); after != before {
				transitions = append(transitions, end)
			}
			t0 = end
		}
		// Plus an ordinary window, and the turn of the year.
		transitions = append(transitions, time.Date(year, 6, 1, 0, 0, 0, 0, loc), time.Date(year, 12, 31, 0, 0, 0, 0, time.UTC))
		for _, tr := range transitions {
			for _, expr := range cronTestExprs {
				t.Run(fmt.Sprintf("%s/%s/%s", tz, tr.Format(time.DateTime), expr), func(t *testing.T) {
					t.Parallel()
					c := mustCron(t, expr, tz)
					from, to := tr.Add(-26*time.Hour-17*time.Minute), tr.Add(26*time.Hour)
					want := bruteFirings(c, from, to)
					var got []string
					for u := c.Next(from); !u.After(to); u = c.Next(u) {
						require.False(t, u.IsZero())
						got = append(got, u.Format(cronLayout))
					}
					require.Equal(t, want, got)
				})
			}
		}
	}
}

// TestCron_NextProperty checks, from random starts across 2026, that Next is strictly
// increasing and never repeats an instant.
func TestCron_NextProperty(t *testing.T) {
	t.Parallel()
	exprs := append([]string{"*/20 * * * * *", "15 */2 * * 1-5", "0 0 13 * 5", "0 12 29 2 *"}, cronTestExprs...)
	for _, tz := range cronTestZones {
		for _, expr := range exprs {
			t.Run(tz+"/"+expr, func(t *testing.T) {
				t.Parallel()
				c := mustCron(t, expr, tz)
				rng := rand.New(rand.NewPCG(uint64(len(tz)), uint64(len(expr))))
				startOfYear := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				for range 40 {
					start := startOfYear.Add(time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
					seen := make(map[int64]bool)
					prev := start
					for range 60 {
						if prev.Year() >= 2090 { // "0 12 29 2 *": no Feb 29 from 2097 to 2103
							break
						}
						next := c.Next(prev)
						require.False(t, next.IsZero(), "no next after %s", prev)
						require.True(t, next.After(prev), "Next(%s) = %s", prev, next)
						require.False(t, seen[next.UnixNano()], "repeated %s", next)
						seen[next.UnixNano()] = true
						prev = next
					}
				}
			})
		}
	}
}

func TestCron_NextConcurrent(t *testing.T) {
	t.Parallel()
	c := mustCron(t, "*/15 * * * *", "America/New_York")
	start := mustTime(t, "2026-11-01T00:00:00-04:00")
	want := walk(c, start, 20)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				if got := walk(c, start, 20); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("concurrent walk = %v, want %v", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func FuzzParseCron(f *testing.F) {
	for _, s := range []string{
		"* * * * *", "*/15 2 * * *", "0 0 29 2 *", "30 0 9 * * mon-fri", "@hourly", "@reboot",
		"61 * * * *", "1-7/2 * * * 7", "0 0 L * *", "", "0 0 ? * 5#3", "5/10 */3 1,15 jan-dec *",
	} {
		f.Add(s, uint8(0), int32(0))
		f.Add(s, uint8(3), int32(-1234567))
		f.Add(s, uint8(1), int32(20971520))
	}
	zones := []string{"", "America/New_York", "Australia/Lord_Howe", "America/Sao_Paulo", "Antarctica/Troll"}
	start := time.Date(2026, 3, 8, 6, 59, 59, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string, zone uint8, shift int32) {
		c, err := ParseCron(expr, zones[int(zone)%len(zones)])
		if err != nil {
			require.Nil(t, c)
			return
		}
		at := start.Add(time.Duration(shift) * time.Second) // 1958 to 2094
		for range 5 {
			next := c.Next(at)
			require.False(t, next.IsZero(), "%q: no next after %s", expr, at)
			require.True(t, next.After(at), "%q: Next(%s) = %s", expr, at, next)
			at = next
		}
	})
}

func BenchmarkCron_Next(b *testing.B) {
	for _, bc := range []struct{ expr, tz string }{
		{"* * * * *", ""},
		{"*/15 * * * *", "America/New_York"},
		{"30 2 * * *", "America/New_York"},
		{"0 9 * * 1-5", "Europe/London"},
		{"0 0 29 2 *", "Australia/Lord_Howe"},
	} {
		b.Run(bc.expr+"|"+bc.tz, func(b *testing.B) {
			c := mustCron(b, bc.expr, bc.tz)
			at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			b.ReportAllocs()
			for b.Loop() {
				at = c.Next(at)
				if at.Year() > 2040 {
					at = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
				}
			}
		})
	}
}

// TestCron_NextJustBeforeJump starts Next in the last second before a forward jump (and at
// the jump itself): a fixed-hour time in the gap still fires right after the jump.
func TestCron_NextJustBeforeJump(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, tz, expr, after, want string
	}{
		// America/New_York: 2019-03-10 02:00 EST -> 03:00 EDT (07:00Z).
		{"NY last second", "America/New_York", "30 2 * * *", "2019-03-10T06:59:59Z", "2019-03-10T03:00:00-04:00"},
		{"NY last nanosecond", "America/New_York", "30 2 * * *", "2019-03-10T06:59:59.999999999Z", "2019-03-10T03:00:00-04:00"},
		{"NY half second", "America/New_York", "30 2 * * *", "2019-03-10T06:59:59.5Z", "2019-03-10T03:00:00-04:00"},
		{"NY two seconds", "America/New_York", "30 2 * * *", "2019-03-10T06:59:58Z", "2019-03-10T03:00:00-04:00"},
		{"NY at the jump", "America/New_York", "30 2 * * *", "2019-03-10T07:00:00Z", "2019-03-11T02:30:00-04:00"},
		{"NY several in gap", "America/New_York", "*/15 2 * * *", "2019-03-10T06:59:59Z", "2019-03-10T03:00:00-04:00"},
		{"NY seconds field", "America/New_York", "30 30 2 * * *", "2019-03-10T06:59:59Z", "2019-03-10T03:00:00-04:00"},
		{"NY 2040 rule", "America/New_York", "30 2 * * *", "2040-03-11T06:59:59Z", "2040-03-11T03:00:00-04:00"},
		{"NY hourly skips gap", "America/New_York", "30 * * * *", "2019-03-10T06:59:59Z", "2019-03-10T03:30:00-04:00"},
		{"NY fixed at 3:00", "America/New_York", "0 3 * * *", "2019-03-10T06:59:59Z", "2019-03-10T03:00:00-04:00"},
		// America/Sao_Paulo: 2018-11-04 00:00 -03:00 -> 01:00 -02:00 (03:00Z).
		{"Sao Paulo last second", "America/Sao_Paulo", "0 0 * * *", "2018-11-04T02:59:59Z", "2018-11-04T01:00:00-02:00"},
		{"Sao Paulo daily macro", "America/Sao_Paulo", "@daily", "2018-11-04T02:59:59Z", "2018-11-04T01:00:00-02:00"},
		{"Sao Paulo at the jump", "America/Sao_Paulo", "0 0 * * *", "2018-11-04T03:00:00Z", "2018-11-05T00:00:00-02:00"},
		// Australia/Lord_Howe: 2026-10-04 02:00 +10:30 -> 02:30 +11:00 (15:30Z the day before).
		{"Lord Howe last second", "Australia/Lord_Howe", "15 2 * * *", "2026-10-03T15:29:59Z", "2026-10-04T02:30:00+11:00"},
		// Europe/London: 2026-03-29 01:00 GMT -> 02:00 BST (01:00Z).
		{"London last second", "Europe/London", "30 1 * * *", "2026-03-29T00:59:59Z", "2026-03-29T02:00:00+01:00"},
		// Pacific/Apia skipped 2011-12-30: 2011-12-29 24:00 -10:00 -> 2011-12-31 00:00 +14:00.
		{"Apia skipped day", "Pacific/Apia", "0 9 * * *", "2011-12-30T09:59:59Z", "2011-12-31T00:00:00+14:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := mustCron(t, tt.expr, tt.tz)
			after := mustTime(t, tt.after)
			got := c.Next(after)
			require.Equal(t, tt.want, got.Format(cronLayout))
			require.True(t, got.After(after))
		})
	}
}
