package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// A job is stored in one of three forms (lua/include/forms.lua; docs/architecture.md
// draws how a job moves between them). This file is all the Go code that knows them:
//
//	form    written when (Config)                 read by            listed from
//	hash    cron jobs; NoPack; any thaw           HGETALL (Get)      SCAN of job keys
//	packed  one-time, not cold (NoPack false)     read_jobs          HSCAN of PackedJobs
//	cold    one-time due after ColdAfter          read_jobs          SCAN of ColdIndex keys
//
// A claim returns a packed job's value as it is stored (parsePacked). Every other reader
// goes through readJob, which turns any form into the fields of the job hash it is or
// will be when thawed.

// readJob returns the fields of job jobID of shard id as the job hash it is or will be
// when thawed (whatever its form), and its expiry time (ms, -1 or 0 none); ErrNotFound
// when there is no such job.
func (s *Store) readJob(ctx context.Context, id ID, jobID string) (map[string]string, int64, error) {
	key := s.keys.Job(id, jobID)
	res := s.c.DoMulti(ctx, s.c.B().Hgetall().Key(key).Build(), s.c.B().Pexpiretime().Key(key).Build())
	m, err := res[0].AsStrMap()
	if err != nil {
		return nil, 0, fmt.Errorf("read job %q: %w", jobID, err)
	}
	if len(m) > 0 {
		exp, _ := res[1].AsInt64()
		return m, exp, nil
	}
	return s.readOtherForms(ctx, id, jobID)
}

// readOtherForms is readJob for a job that has no hash: packed or cold (read_jobs).
func (s *Store) readOtherForms(ctx context.Context, id ID, jobID string) (map[string]string, int64, error) {
	recs, err := s.ReadJobs(ctx, id, []string{jobID})
	if err != nil {
		return nil, 0, fmt.Errorf("read job %q: %w", jobID, err)
	}
	if len(recs) == 0 {
		return nil, 0, ErrNotFound
	}
	return recs[0].fieldMap(), recs[0].ExpireAt, nil
}

// scanPacked returns the ids of a piece of shard id's packed jobs (Config.NoPack), from
// an HSCAN of their hash, and the cursor of the next piece (0: none). A large shard's
// packed jobs are read in pieces: all at once would hold Redis up.
func (s *Store) scanPacked(ctx context.Context, id ID, cursor uint64, count int64) ([]string, uint64, error) {
	e, err := s.c.Do(ctx, s.c.B().Hscan().Key(s.keys.PackedJobs(id)).Cursor(cursor).Count(count).Build()).AsScanEntry()
	if err != nil {
		return nil, 0, fmt.Errorf("packed jobs of shard %d: %w", id, err)
	}
	ids := make([]string, 0, len(e.Elements)/2)
	for k := 0; k+1 < len(e.Elements); k += 2 {
		// The field "" is no job: it keeps the hash a hash table (lua packed's as_table).
		if e.Elements[k] != "" {
			ids = append(ids, e.Elements[k])
		}
	}
	return ids, e.Cursor, nil
}

// jobMatch is the SCAN pattern matching the job keys and cold indexes (Keys.Job,
// Keys.ColdIndex) of every shard of the namespace: `<ns>:v2:{*}:[jc]*`, the namespace's
// glob characters escaped. It matches other keys of the namespace too (the cold lists,
// and a '*' spans ':' and '}'); splitJobKey tells them apart.
func (s *Store) jobMatch() string { return globQuote(s.keys.global()) + "{*}:[jc]*" }

// globQuote escapes the glob characters of v for a SCAN pattern that matches v itself.
func globQuote(v string) string {
	var b strings.Builder
	for _, c := range v {
		switch c {
		case '*', '?', '[', ']', '\\', '^':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// shardIDs maps the key prefix of each shard to its id, for splitJobKey.
func (s *Store) shardIDs() map[string]ID {
	shards := make(map[string]ID, len(s.keys.prefixes))
	for i, p := range s.keys.prefixes {
		shards[p] = ID(i)
	}
	return shards
}

// splitJobKey returns the shard of key when it is the key of a job of one of the shards
// (keyed by their Keys.Prefix), `<prefix>job:<id>`, with the job id, or the key of one of
// their cold indexes, `<prefix>cold:index:<slot>`, with cold true.
func (s *Store) splitJobKey(shards map[string]ID, key string) (id ID, jobID string, cold, ok bool) {
	g := s.keys.global()
	if !strings.HasPrefix(key, g+"{") {
		return 0, "", false, false
	}
	end := strings.IndexByte(key[len(g):], '}')
	if end < 0 {
		return 0, "", false, false
	}
	prefix := key[:len(g)+end+1] + ":" // `<ns>:v2:{<tag>}:`, as Keys.Prefix
	id, ok = shards[prefix]
	switch rest := key[len(prefix):]; {
	case !ok:
		return 0, "", false, false
	case strings.HasPrefix(rest, "job:") && len(rest) > len("job:"):
		return id, rest[len("job:"):], false, true
	case strings.HasPrefix(rest, coldIndexKind) && len(rest) > len(coldIndexKind):
		return id, "", true, true
	}
	return 0, "", false, false
}

// jobsOfKeys returns, per shard, the ids of the jobs that keys (a SCAN batch of
// jobMatch) name: a job key its job, a cold job index the cold jobs it holds (read in
// one pipeline). Other keys are left out.
func (s *Store) jobsOfKeys(ctx context.Context, shards map[string]ID, keys []string) (map[ID][]string, error) {
	batch := map[ID][]string{}
	var idx []string
	var idxShard []ID
	for _, k := range keys {
		id, jobID, cold, ok := s.splitJobKey(shards, k)
		switch {
		case !ok:
		case cold:
			idx, idxShard = append(idx, k), append(idxShard, id)
		default:
			batch[id] = append(batch[id], jobID)
		}
	}
	if len(idx) == 0 {
		return batch, nil
	}
	cmds := make(rueidis.Commands, len(idx))
	for i, k := range idx {
		cmds[i] = s.c.B().Hkeys().Key(k).Build()
	}
	for i, r := range s.c.DoMulti(ctx, cmds...) {
		ids, err := r.AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("read cold jobs %s: %w", idx[i], err)
		}
		batch[idxShard[i]] = append(batch[idxShard[i]], ids...)
	}
	return batch, nil
}

// parsePacked reads the type, payload and settings of a packed job's value (lua packed's
// PackedJobs): "created|visibility|queue|priority|id|offset|age|dh|k", then name=length:value
// per definition field that differs from its default, the payload last and whole. A
// setting left out keeps its default.
func (c *Claimed) parsePacked(v string) error {
	rest := v
	for range 8 {
		i := strings.IndexByte(rest, '|')
		if i < 0 {
			return errors.New("short header")
		}
		rest = rest[i+1:]
	}
	if rest == "" {
		return errors.New("short header")
	}
	c.Payload = []byte{}
	for rest = rest[1:]; rest != ""; {
		eq := strings.IndexByte(rest, '=')
		colon := strings.IndexByte(rest, ':')
		if eq < 0 || colon < eq {
			return fmt.Errorf("bad field at %q", trunc(rest))
		}
		n, err := strconv.Atoi(rest[eq+1 : colon])
		if err != nil || n < 0 || colon+1+n > len(rest) {
			return fmt.Errorf("bad field length at %q", trunc(rest))
		}
		name, val := rest[:eq], rest[colon+1:colon+1+n]
		rest = rest[colon+1+n:]
		switch name {
		case "t":
			c.Type = val
		case "p":
			c.Payload = []byte(val)
		case "to", "vt":
			ms, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return fmt.Errorf("%s %q: %w", name, val, err)
			}
			if name == "to" {
				c.Timeout = time.Duration(ms) * time.Millisecond
			} else {
				c.Visibility = time.Duration(ms) * time.Millisecond
			}
		case "ma":
			if c.MaxAttempts, err = strconv.Atoi(val); err != nil {
				return fmt.Errorf("ma %q: %w", val, err)
			}
		case "tg":
			c.Target = decodeTarget(val)
		}
	}
	return nil
}
