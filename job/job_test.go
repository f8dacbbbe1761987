package job

import (
	"errors"
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
