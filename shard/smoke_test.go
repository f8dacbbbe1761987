package shard

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/job"
)

func TestSmoke(t *testing.T) {
	m := miniredis.RunT(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	s, err := Open(ctx, c, Config{Namespace: "t1", Shards: 4})
	require.NoError(t, err)
	res, err := s.Create(ctx, []*job.Job{{ID: "a", Type: "x", Schedule: job.Schedule{Now: true}}, {ID: "b", Type: "x", Schedule: job.Schedule{Delay: time.Second}}})
	require.NoError(t, err)
	t.Logf("%+v", res)
	id := s.ShardOf("a")
	cl, err := s.Claim(ctx, id, "default", 10, "w", "n")
	require.NoError(t, err)
	t.Logf("%+v", cl)
	require.Len(t, cl, 1)
	errs, err := s.FinishRuns(ctx, id, []Finish{{Member: cl[0].Member, Token: cl[0].Token, Outcome: Succeeded}})
	require.NoError(t, err)
	t.Log(errs)
	info, err := s.Get(ctx, "a")
	require.NoError(t, err)
	t.Logf("%+v", info)
	runs, err := s.Runs(ctx, "a")
	require.NoError(t, err)
	t.Logf("%+v", runs)
	m.SetTime(time.Now().Add(2 * time.Second))
	bid := s.ShardOf("b")
	l := s.AcquireLeases(ctx, "d", []ID{bid}, 5*time.Second)
	t.Logf("%+v", l)
	p, err := s.Peek(ctx, bid, 100)
	require.NoError(t, err)
	t.Logf("%+v", p)
	var plans []FirePlan
	for _, e := range p.Entries {
		plans = append(plans, FirePlan{Entry: e})
	}
	n, err := s.Fire(ctx, l[0].Lease, plans)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
