package shard

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// ShardView is one shard as the cluster view shows it: its lease and its counts, so that
// a hot shard (or one nobody owns) stands out.
type ShardView struct {
	Shard     ID
	Owner     string // "" when no dispatcher holds the lease
	Epoch     int64
	LeaseTTL  time.Duration
	Scheduled int64
	Ready     int64
	InFlight  int64
	Dead      int64
}

// MemberView is a live dispatcher.
type MemberView struct {
	Name    string
	Expires time.Time // its membership lapses then unless it heartbeats
	Shards  []ID      // the shards whose lease it holds
}

// NodeView is a Redis node of the client.
type NodeView struct {
	Addr string
	Role string // "master", "slave" (as ROLE says) or "" when it did not answer
}

// ClusterView is what runs the namespace: dispatchers and their shards, per-shard
// counts, workers seen recently and Redis nodes.
type ClusterView struct {
	Members []MemberView
	Shards  []ShardView
	Workers []WorkerInfo
	Nodes   []NodeView
}

// WorkersRecent is how far back ClusterView's workers go.
const WorkersRecent = 5 * time.Minute

// Cluster reads the cluster view: one pipeline of a few commands per shard (its lease,
// lease TTL, stats hash, in-flight and ready counts), plus the member and worker sets and
// a ROLE per node. Each command touches one key.
func (s *Store) Cluster(ctx context.Context) (*ClusterView, error) {
	v := &ClusterView{Shards: make([]ShardView, s.cfg.Shards)}
	ms, err := s.c.Do(ctx, s.c.B().Zrangebyscore().Key(s.keys.Members()).
		Min(strconv.FormatInt(time.Now().UnixMilli()-60000, 10)).Max("+inf").Withscores().Build()).AsZScores()
	if err != nil {
		return nil, fmt.Errorf("cluster: members: %w", err)
	}
	byName := map[string]*MemberView{}
	for _, m := range ms {
		v.Members = append(v.Members, MemberView{Name: m.Member, Expires: time.UnixMilli(int64(m.Score))})
	}
	for i := range v.Members {
		byName[v.Members[i].Name] = &v.Members[i]
	}
	_, perShard, err := s.stats(ctx)
	if err != nil {
		return nil, err
	}
	const per = 4
	cmds := make(rueidis.Commands, 0, s.cfg.Shards*per)
	for i := range s.cfg.Shards {
		id := ID(i)
		cmds = append(cmds, s.c.B().Get().Key(s.keys.Lease(id)).Build(),
			s.c.B().Pttl().Key(s.keys.Lease(id)).Build(),
			s.c.B().Hgetall().Key(s.keys.Stats(id)).Build(),
			s.c.B().Zcount().Key(s.keys.Inflight(id)).Min("-inf").Max(RunScoreMax).Build())
	}
	var readyIdx []ID
	for sh, qs := range perShard {
		for _, q := range qs {
			cmds = append(cmds, s.c.B().Zcount().Key(s.keys.Ready(ID(sh), q)).Min("-inf").Max(RunScoreMax).Build())
			readyIdx = append(readyIdx, ID(sh))
		}
	}
	res := s.c.DoMulti(ctx, cmds...)
	for i := range s.cfg.Shards {
		sv := &v.Shards[i]
		sv.Shard = ID(i)
		r := res[i*per : i*per+per]
		if lease, err := r[0].ToString(); err == nil {
			if o, e, ok := strings.Cut(lease, ":"); ok {
				sv.Owner = o
				sv.Epoch, _ = strconv.ParseInt(e, 10, 64)
			}
		} else if !rueidis.IsRedisNil(err) {
			return nil, fmt.Errorf("cluster: lease of shard %d: %w", i, err)
		}
		if ttl, err := r[1].AsInt64(); err == nil && ttl > 0 {
			sv.LeaseTTL = time.Duration(ttl) * time.Millisecond
		}
		st, err := r[2].AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("cluster: stats of shard %d: %w", i, err)
		}
		for f, val := range st {
			n, _ := strconv.ParseInt(val, 10, 64)
			switch {
			case strings.HasPrefix(f, "s:"):
				sv.Scheduled += max(n, 0)
			case strings.HasPrefix(f, "d:"):
				sv.Dead += max(n, 0)
			}
		}
		if sv.InFlight, err = r[3].AsInt64(); err != nil {
			return nil, fmt.Errorf("cluster: in flight of shard %d: %w", i, err)
		}
		if m := byName[sv.Owner]; m != nil {
			m.Shards = append(m.Shards, sv.Shard)
		}
	}
	for k, id := range readyIdx {
		n, err := res[s.cfg.Shards*per+k].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("cluster: ready of shard %d: %w", id, err)
		}
		v.Shards[id].Ready += n
	}
	if v.Workers, err = s.Workers(ctx, time.Now().Add(-WorkersRecent)); err != nil {
		return nil, err
	}
	for addr, n := range s.c.Nodes() {
		nv := NodeView{Addr: addr}
		if role, err := n.Do(ctx, n.B().Role().Build()).ToArray(); err == nil && len(role) > 0 {
			nv.Role = str(role[0])
		}
		v.Nodes = append(v.Nodes, nv)
	}
	sort.Slice(v.Nodes, func(a, b int) bool { return v.Nodes[a].Addr < v.Nodes[b].Addr })
	return v, nil
}
