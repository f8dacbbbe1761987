package job

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNormalize_Defaults(t *testing.T) {
	t.Parallel()
	j := &Job{Type: "t", Schedule: Schedule{Now: true}}
	require.NoError(t, j.Normalize(0))
	require.Len(t, j.ID, 26)
	require.Equal(t, DefaultQueue, j.Queue)
	require.Equal(t, DefaultPriority, *j.Priority)
	require.Equal(t, DefaultMaxAttempts, j.Retry.MaxAttempts)
	require.Equal(t, OverlapSkip, j.Overlap)
	require.Equal(t, MisfireRunOnce, j.Misfire)
	require.Equal(t, DefaultVisibility, j.Visibility)
}

func TestNormalize_FieldErrors(t *testing.T) {
	t.Parallel()
	pri := func(p int) *int { return &p }
	tests := []struct {
		field string
		job   Job
	}{
		{"type", Job{Schedule: Schedule{Now: true}}},
		{"id", Job{ID: "a b", Type: "t", Schedule: Schedule{Now: true}}},
		{"id", Job{ID: strings.Repeat("a", 129), Type: "t", Schedule: Schedule{Now: true}}},
		{"queue", Job{Queue: "q:1", Type: "t", Schedule: Schedule{Now: true}}},
		{"schedule", Job{Type: "t"}},
		{"schedule", Job{Type: "t", Schedule: Schedule{Now: true, Delay: time.Second}}},
		{"schedule.delay", Job{Type: "t", Schedule: Schedule{Delay: -time.Second}}},
		{"schedule.cron", Job{Type: "t", Schedule: Schedule{Cron: "61 * * * *"}}},
		{"schedule.timezone", Job{Type: "t", Schedule: Schedule{Cron: "* * * * *", TimeZone: "Mars/Base"}}},
		{"schedule.timezone", Job{Type: "t", Schedule: Schedule{Now: true, TimeZone: "UTC"}}},
		{"priority", Job{Type: "t", Priority: pri(10), Schedule: Schedule{Now: true}}},
		{"priority", Job{Type: "t", Priority: pri(-1), Schedule: Schedule{Now: true}}},
		{"payload", Job{Type: "t", Payload: make([]byte, 11), Schedule: Schedule{Now: true}}},
		{"retry.max_attempts", Job{Type: "t", Retry: RetryPolicy{MaxAttempts: -1}, Schedule: Schedule{Now: true}}},
		{"retry.max_backoff", Job{Type: "t", Retry: RetryPolicy{InitialBackoff: time.Hour, MaxBackoff: time.Second}, Schedule: Schedule{Now: true}}},
		{"retry.multiplier", Job{Type: "t", Retry: RetryPolicy{Multiplier: 0.5}, Schedule: Schedule{Now: true}}},
		{"retry.jitter", Job{Type: "t", Retry: RetryPolicy{Jitter: 2}, Schedule: Schedule{Now: true}}},
		{"visibility", Job{Type: "t", Visibility: time.Millisecond, Schedule: Schedule{Now: true}}},
		{"overlap", Job{Type: "t", Overlap: "sometimes", Schedule: Schedule{Now: true}}},
		{"misfire", Job{Type: "t", Misfire: "maybe", Schedule: Schedule{Now: true}}},
	}
	for _, tt := range tests {
		j := tt.job
		err := j.Normalize(10)
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", tt.field, err)
		require.Equal(t, tt.field, fe.Field, err.Error())
		require.NotEmpty(t, fe.Msg)
	}
}

func TestRetryPolicy_Backoff(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, Multiplier: 2, Jitter: 0.5}
	require.Equal(t, time.Second, p.Backoff(1, 0.5))
	require.Equal(t, 4*time.Second, p.Backoff(3, 0.5))
	require.Equal(t, 10*time.Second, p.Backoff(10, 0.5))
	require.Equal(t, 5*time.Second, p.Backoff(10, 0))
}

func FuzzNormalize(f *testing.F) {
	f.Add("id-1", "default", "t", "", "UTC", int64(0), 5)
	f.Add("", "", "", "*/5 * * * * *", "Europe/London", int64(1000), 9)
	f.Add("a:b", "q q", "\x00", "@hourly", "", int64(-1), 11)
	f.Fuzz(func(t *testing.T, id, queue, typ, cron, tz string, delay int64, pri int) {
		j := &Job{ID: id, Queue: queue, Type: typ, Priority: &pri,
			Schedule: Schedule{Cron: cron, TimeZone: tz, Delay: time.Duration(delay)}}
		err := j.Normalize(0)
		if err != nil {
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.NotEmpty(t, fe.Field)
			return
		}
		require.NoError(t, ValidateID("id", j.ID, MaxIDLen))
		require.NoError(t, ValidateID("queue", j.Queue, MaxQueueLen))
	})
}

// TestNormalize_TimeRange checks the range of the times and delays a job may name: a
// time before 2000 or from 2200 on, a delay or backoff over MaxDelay, are refused with
// the field named.
func TestNormalize_TimeRange(t *testing.T) {
	t.Parallel()
	at := func(s string) Schedule {
		ts, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return Schedule{At: ts}
	}
	tests := []struct {
		name  string
		sch   Schedule
		retry RetryPolicy
		field string // "" means valid
	}{
		{"year 1", at("0001-01-01T00:00:01Z"), RetryPolicy{}, "schedule.at"},
		{"1969", at("1969-12-31T00:00:00Z"), RetryPolicy{}, "schedule.at"},
		{"1 ms before 1970", at("1969-12-31T23:59:59.999Z"), RetryPolicy{}, "schedule.at"},
		{"1 ns before 1970", at("1969-12-31T23:59:59.999999999Z"), RetryPolicy{}, "schedule.at"},
		{"1970 in another zone", at("1970-01-01T00:30:00+01:00"), RetryPolicy{}, "schedule.at"},
		{"the epoch", at("1970-01-01T00:00:00Z"), RetryPolicy{}, "schedule.at"},
		{"1999", at("1999-12-31T23:59:59.999Z"), RetryPolicy{}, "schedule.at"},
		{"2000 in another zone", at("2000-01-01T00:30:00+01:00"), RetryPolicy{}, "schedule.at"},
		{"2000", at("2000-01-01T00:00:00Z"), RetryPolicy{}, ""},
		{"2026", at("2026-11-26T12:00:00Z"), RetryPolicy{}, ""},
		{"last ms before 2200", at("2199-12-31T23:59:59.999Z"), RetryPolicy{}, ""},
		{"2200", at("2200-01-01T00:00:00Z"), RetryPolicy{}, "schedule.at"},
		{"2287: priorities would mix", at("2287-01-01T00:00:00Z"), RetryPolicy{}, "schedule.at"},
		{"year 9999", at("9999-12-31T23:59:59Z"), RetryPolicy{}, "schedule.at"},
		{"max time", Schedule{At: time.Unix(1<<63-62135596801, 999999999)}, RetryPolicy{}, "schedule.at"},
		{"min time", Schedule{At: time.Unix(-1<<63, 0)}, RetryPolicy{}, "schedule.at"},
		{"max delay", Schedule{Delay: MaxDelay}, RetryPolicy{}, ""},
		{"over max delay", Schedule{Delay: MaxDelay + time.Millisecond}, RetryPolicy{}, "schedule.delay"},
		{"largest duration", Schedule{Delay: math.MaxInt64}, RetryPolicy{}, "schedule.delay"},
		{"max backoff", Schedule{Now: true}, RetryPolicy{MaxBackoff: MaxDelay}, ""},
		{"over max backoff", Schedule{Now: true}, RetryPolicy{MaxBackoff: math.MaxInt64}, "retry.max_backoff"},
		{"over initial backoff", Schedule{Now: true}, RetryPolicy{InitialBackoff: math.MaxInt64, MaxBackoff: math.MaxInt64}, "retry.initial_backoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := Job{Type: "t", Schedule: tt.sch, Retry: tt.retry}
			err := j.Normalize(0)
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field, err.Error())
		})
	}
}
