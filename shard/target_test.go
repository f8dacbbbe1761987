package shard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// A job's target (field 'tg') reads back the same from a job hash, a packed job and a
// cold job, is part of the definition's hash (a create with another target conflicts),
// and comes with claimed runs' type.
func TestTarget_StoredInEveryForm(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		hashes := open(t, b, shard.Config{Shards: 1, ColdAfter: -1, NoPack: true})
		packed := open(t, b, shard.Config{Shards: 1, ColdAfter: -1})
		cold := open(t, b, shard.Config{Shards: 1, ColdAfter: time.Minute, NoPack: true})
		now, err := hashes.ServerNow(ctx)
		require.NoError(t, err)
		target := func() *job.Target {
			return &job.Target{URL: "https://hooks.example.com/a?b=c", Method: "PUT",
				Headers: map[string]string{"Authorization": "Bearer x|y=z:1", "X-Long": "0123456789012345678901234567890123456789012345678901234567890123456789"},
				Timeout: 5 * time.Second}
		}
		mk := func(id string, sch job.Schedule) *job.Job {
			return &job.Job{ID: id, Target: target(), Payload: []byte(`{"a":1}`), Schedule: sch}
		}
		for _, tc := range []struct {
			name string
			s    *shard.Store
			sch  job.Schedule
			form func(id string) bool
		}{
			{"Hash", hashes, job.Schedule{Now: true}, func(id string) bool { return jobExists(t, b, hashes, id) }},
			{"Packed", packed, job.Schedule{Now: true}, func(id string) bool { return !jobExists(t, b, packed, id) }},
			{"Cold", cold, job.Schedule{At: now.Add(2 * time.Hour)}, func(id string) bool { return !jobExists(t, b, cold, id) }},
		} {
			id := "tg-" + tc.name
			res, err := tc.s.Create(ctx, []*job.Job{mk(id, tc.sch)})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			require.True(t, res[0].Created)
			require.True(t, tc.form(id), "%s is in its form", tc.name)
			info, err := tc.s.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, job.PushType, info.Type, tc.name)
			want := target()
			want.Headers = map[string]string{"Authorization": "Bearer x|y=z:1", "X-Long": want.Headers["X-Long"]}
			require.Equal(t, want, info.Target, tc.name)

			// The same definition finds the job; another target conflicts.
			res, err = tc.s.Create(ctx, []*job.Job{mk(id, tc.sch)})
			require.NoError(t, err)
			require.False(t, res[0].Created)
			require.False(t, res[0].Conflict, tc.name)
			other := mk(id, tc.sch)
			other.Target.URL = "https://hooks.example.com/other"
			res, err = tc.s.Create(ctx, []*job.Job{other})
			require.NoError(t, err)
			require.True(t, res[0].Conflict, tc.name)
		}
		// A snapshot's read and restore keep it (each form is read as a hash).
		for _, tc := range []struct {
			s  *shard.Store
			id string
		}{{hashes, "tg-Hash"}, {packed, "tg-Packed"}, {cold, "tg-Cold"}} {
			recs, err := tc.s.ReadJobs(ctx, 0, []string{tc.id})
			require.NoError(t, err)
			require.Len(t, recs, 1)
			fresh := open(t, b, shard.Config{Shards: 1})
			_, err = fresh.RestoreJobs(ctx, 0, recs)
			require.NoError(t, err)
			info, err := fresh.Get(ctx, tc.id)
			require.NoError(t, err)
			require.Equal(t, "https://hooks.example.com/a?b=c", info.Target.URL, tc.id)
			require.Equal(t, job.PushType, info.Type)
		}

		// A claimed run carries the push type, and its target: a packed one from its
		// value, a job hash's from the claim's targets.
		for _, s := range []*shard.Store{packed, hashes} {
			runs, err := s.Claim(ctx, 0, job.DefaultPushQueue, 10, "w", "n")
			require.NoError(t, err)
			require.Len(t, runs, 1)
			require.Equal(t, job.PushType, runs[0].Type)
			want := target()
			require.Equal(t, want, runs[0].Target)
		}
	})
}

// A claim returns the targets of the push runs among the runs of job hashes, in a batch
// mixed with other runs (which have none), with default settings or not.
func TestTarget_Claimed(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		for _, noPack := range []bool{true, false} {
			s := open(t, b, shard.Config{Shards: 1, ColdAfter: -1, NoPack: noPack})
			var jobs []*job.Job
			for i := range 6 {
				j := &job.Job{ID: fmt.Sprintf("j%d", i), Queue: "mixed", Payload: []byte("x"), Schedule: job.Schedule{Now: true}}
				if i%2 == 0 {
					j.Target = &job.Target{URL: fmt.Sprintf("http://h%d.example.com/", i), Timeout: time.Duration(i+1) * time.Second}
				} else {
					j.Type = "plain"
				}
				if i == 4 {
					j.Timeout, j.Visibility, j.Retry.MaxAttempts = time.Minute, time.Minute, 7 // a rest
				}
				jobs = append(jobs, j)
			}
			res, err := s.Create(ctx, jobs)
			require.NoError(t, err)
			for _, r := range res {
				require.NoError(t, r.Err)
			}
			runs, err := s.Claim(ctx, 0, "mixed", 10, "w", "n")
			require.NoError(t, err)
			require.Len(t, runs, 6)
			for _, r := range runs {
				var i int
				_, err := fmt.Sscanf(r.JobID, "j%d", &i)
				require.NoError(t, err)
				if i%2 == 1 {
					require.Nil(t, r.Target, r.JobID)
					require.Equal(t, "plain", r.Type)
					continue
				}
				require.Equal(t, job.PushType, r.Type)
				require.NotNil(t, r.Target, r.JobID)
				require.Equal(t, fmt.Sprintf("http://h%d.example.com/", i), r.Target.URL)
				require.Equal(t, time.Duration(i+1)*time.Second, r.Target.Timeout)
			}
		}
	})
}
