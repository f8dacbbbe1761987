package shardtest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Form is a storage form of a job (lua/include/forms.lua) as the conformance suite makes
// one: the store configuration and the schedule under which Create stores a job in it.
// Adding a form to the store adds a row to Forms.
type Form struct {
	Name string
	// Config sets what makes a store keep new jobs in this form.
	Config func(shard.Config) shard.Config
	// Later: the form holds jobs due later than now (FormLater after their creation);
	// else jobs due when they are created.
	Later bool
	// Holds reports whether job jobID of s is in this form now, from its keys.
	Holds func(t testing.TB, s *shard.Store, jobID string) bool
}

// FormLater is how far ahead a job of a Later form is due when it is created: beyond the
// ColdAfter of the cold form, and soon enough for a test to see it fire (ColdThaw).
const FormLater = 3 * time.Second

// coldAfter is the cold form's Config.ColdAfter: a job due FormLater ahead is cold, and its
// bucket (BucketSize, a second) is thawed half of it before it starts.
const coldAfter = 2 * time.Second

func hashConfig(c shard.Config) shard.Config {
	c.NoPack, c.ColdAfter, c.BucketSize = true, -1, time.Second
	return c
}

// Forms lists the forms, each with the job hash it is compared with (Reference):
//
//	hash      the job hash (the reference form)
//	packed    a one-time job due when created, in the packed hash
//	plain     a one-time job due later, packed, its run a plain run
//	cold      a one-time job due beyond ColdAfter, a record in its bucket's list
var Forms = []Form{
	{Name: "hash", Config: hashConfig, Holds: isHash},
	{Name: "hash-later", Config: hashConfig, Later: true, Holds: isHash},
	{Name: "packed", Config: func(c shard.Config) shard.Config {
		c.NoPack, c.ColdAfter, c.BucketSize = false, -1, time.Second
		return c
	}, Holds: isPacked},
	{Name: "plain", Config: func(c shard.Config) shard.Config {
		c.NoPack, c.ColdAfter, c.BucketSize = false, -1, time.Second
		return c
	}, Later: true, Holds: func(t testing.TB, s *shard.Store, jobID string) bool {
		if !isPacked(t, s, jobID) {
			return false
		}
		info, err := s.Get(context.Background(), jobID)
		require.NoError(t, err)
		member := shard.RunMember(jobID, info.NextRunAt.UnixMilli())
		key := s.Keys().Plain(s.ShardOf(jobID), info.PriorityOrDefault(), info.Queue)
		_, err = s.Client().Do(context.Background(), s.Client().B().Zscore().Key(key).Member(member).Build()).AsFloat64()
		if rueidis.IsRedisNil(err) {
			return false
		}
		require.NoError(t, err)
		return true
	}},
	{Name: "cold", Config: func(c shard.Config) shard.Config {
		c.NoPack, c.ColdAfter, c.BucketSize = true, coldAfter, time.Second
		return c
	}, Later: true, Holds: func(t testing.TB, s *shard.Store, jobID string) bool {
		id := s.ShardOf(jobID)
		return count(t, s, s.Client().B().Hexists().Key(s.Keys().ColdIndex(id, shard.ColdSlot(jobID))).Field(jobID).Build()) > 0
	}},
}

// Reference returns the form a job of form f is compared with: the job hash due at the
// same time.
func (f Form) Reference() Form {
	if f.Later {
		return Forms[1]
	}
	return Forms[0]
}

// Schedule returns the schedule of a job of the form created at now.
func (f Form) Schedule(now time.Time) job.Schedule {
	if f.Later {
		return job.Schedule{At: now.Add(FormLater).Truncate(time.Millisecond)}
	}
	return job.Schedule{Now: true}
}

func isHash(t testing.TB, s *shard.Store, jobID string) bool {
	return count(t, s, s.Client().B().Exists().Key(s.Keys().Job(s.ShardOf(jobID), jobID)).Build()) > 0
}

func isPacked(t testing.TB, s *shard.Store, jobID string) bool {
	return count(t, s, s.Client().B().Hexists().Key(s.Keys().PackedJobs(s.ShardOf(jobID))).Field(jobID).Build()) > 0
}

// count runs cmd, whose reply is an integer.
func count(t testing.TB, s *shard.Store, cmd rueidis.Completed) int64 {
	t.Helper()
	n, err := s.Client().Do(context.Background(), cmd).AsInt64()
	require.NoError(t, err)
	return n
}
