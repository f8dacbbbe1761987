package shard_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
)

// The jobs of the conformance suite, one per step that changes a job. "ack" is in
// another queue at another priority; "fail" has attempts left, "dead" none; "reap" has
// the shortest visibility timeout, for its run to be reaped soon.
var formSteps = []string{"ack", "cancel", "dead", "extend", "fail", "handback", "pause", "reap", "resume", "snooze", "trigger", "update"}

func formJobs(f shardtest.Form, now time.Time) []*job.Job {
	var jobs []*job.Job
	pri := 7
	for _, id := range formSteps {
		j := &job.Job{ID: id, Type: "t", Payload: []byte("p|" + id + "=1:"), Schedule: f.Schedule(now)}
		switch id {
		case "ack":
			j.Queue, j.Priority, j.Timeout = "q", &pri, 5*time.Second
		case "fail":
			j.Retry = job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Second}
		case "dead":
			j.Retry = job.RetryPolicy{MaxAttempts: 1}
		case "reap":
			j.Visibility = job.MinVisibility
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// The conformance suite of the storage forms (lua/include/forms.lua): a job in each form
// of shardtest.Forms, beside the job hash it stands for, goes through every management
// operation (get, list, runs, update, cancel, pause, resume, trigger, requeue, export and
// restore) and every run transition (fire, claim, ack, fail, retry, reap, snooze,
// hand-back, and a heartbeat), and after each step both read the same (Get, Runs, the
// queue counts) and answered the same.
func TestForms_Conformance(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		for _, f := range shardtest.Forms {
			if f.Reference().Name == f.Name {
				continue
			}
			t.Run(f.Name, func(t *testing.T) {
				t.Parallel()
				conform(t, b, f)
			})
		}
	})
}

func conform(t *testing.T, b redistest.Backend, f shardtest.Form) {
	ctx := context.Background()
	cfg := shard.Config{Shards: 1, Retention: time.Hour}
	w := &shardtest.Twins{T: t, Got: open(t, b, f.Config(cfg)), Ref: open(t, b, f.Reference().Config(cfg))}
	if b.Name == "miniredis" {
		w.Slack = time.Minute // see Twins.Slack: under -race a test runs long
	}
	now, err := w.Got.ServerNow(ctx)
	require.NoError(t, err)
	ids := slices.Clone(formSteps)

	// Create: each job in its form, read alike.
	w.Both(func(s *shard.Store) {
		res, err := s.Create(ctx, formJobs(f, now))
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err, r.ID)
			require.True(t, r.Created, r.ID)
		}
	})
	for _, id := range ids {
		require.True(t, f.Holds(t, w.Got, id), "%s is %s", id, f.Name)
		require.True(t, f.Reference().Holds(t, w.Ref, id), "%s is a job hash", id)
	}
	w.Same(ids...)

	// Management: each answers alike, and leaves its job alike.
	type answer struct {
		State   job.State
		Changed bool
		Err     string
	}
	answers := map[*shard.Store][]answer{}
	w.Both(func(s *shard.Store) {
		add := func(st job.State, changed bool, err error) {
			a := answer{State: st, Changed: changed}
			if err != nil {
				a.Err = err.Error()
			}
			answers[s] = append(answers[s], a)
		}
		pri := 2
		info, err := s.Update(ctx, "update", shard.Update{Priority: &pri})
		require.NoError(t, err)
		add(info.State, true, nil)
		add(s.Cancel(ctx, "cancel"))
		add(s.Pause(ctx, "pause"))
		add(s.Pause(ctx, "resume"))
		add(s.Resume(ctx, "resume"))
		member, err := s.Trigger(ctx, "trigger")
		add("", member != "", err)
	})
	require.Equal(t, answers[w.Ref], answers[w.Got])
	w.Same(ids...)
	sameListings(t, w, ids)

	// Fire: a run due later fires ahead of its time (the dispatcher's lead); a cold job
	// is thawed first, ColdAfter/2 before its bucket starts. Until every run that can
	// fire has.
	leases := map[*shard.Store]shard.Lease{}
	w.Both(func(s *shard.Store) {
		l := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
		require.True(t, l.Held)
		leases[s] = l.Lease
	})
	running := []string{"ack", "dead", "extend", "fail", "handback", "reap", "resume", "snooze", "trigger", "update"}
	for deadline := time.Now().Add(20 * time.Second); ; {
		ready := 0
		w.Both(func(s *shard.Store) {
			_, err := s.FireDue(ctx, leases[s], 100, shardtest.FormLater+time.Second)
			require.NoError(t, err)
			for _, id := range running {
				info, err := s.Get(ctx, id)
				require.NoError(t, err)
				if info.State == job.StateReady {
					ready++
				}
			}
		})
		if ready == 2*len(running) {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d runs of %d ready", ready, 2*len(running))
		time.Sleep(50 * time.Millisecond)
	}
	w.Same(ids...)

	// Claim: the same runs, definitions and tokens.
	got, ref := w.ClaimAll()
	require.Len(t, ref, len(running))
	// The twins' claims are made one after the other (ClaimAll): their ClaimedAt are
	// apart by the calls between them, past a second on two busy cores.
	shardtest.SameClaims(t, ref, got, 5*time.Second)
	w.Same(ids...)

	// Heartbeat, then every end of an attempt.
	w.Both(func(s *shard.Store) {
		c := w.Of(s, got, ref)
		ext, err := s.Extend(ctx, 0, []shard.Held{{Member: c["extend"].Member, Token: c["extend"].Token}})
		require.NoError(t, err)
		require.Equal(t, []int{shard.ExtendOK}, ext)
		fin := []shard.Finish{
			{Member: c["ack"].Member, Token: c["ack"].Token, Outcome: shard.Succeeded},
			{Member: c["fail"].Member, Token: c["fail"].Token, Outcome: shard.Failed, Error: "boom"},
			{Member: c["dead"].Member, Token: c["dead"].Token, Outcome: shard.Failed, Error: "fatal"},
			{Member: c["snooze"].Member, Token: c["snooze"].Token, Outcome: shard.Snoozed, Delay: time.Hour},
			{Member: c["handback"].Member, Token: c["handback"].Token, Outcome: shard.HandBack},
			{Member: c["update"].Member, Token: c["update"].Token, Outcome: shard.Cancelled, Error: "no"},
			// A late ack: the token of another run.
			{Member: c["resume"].Member, Token: c["ack"].Token + "x", Outcome: shard.Succeeded},
		}
		errs, err := s.FinishRuns(ctx, 0, fin)
		require.NoError(t, err)
		require.Equal(t, []error{nil, nil, nil, nil, nil, nil, shard.ErrTokenMismatch}, errs)
	})

	// Reap: the run whose visibility timeout passed, alike (the ends above are checked
	// with it).
	time.Sleep(job.MinVisibility + 100*time.Millisecond)
	w.Both(func(s *shard.Store) {
		n, err := s.Reap(ctx, leases[s], 100)
		require.NoError(t, err)
		require.Equal(t, 1, n, "only reap's run is past its deadline")
	})
	w.Same(ids...)

	// Requeue the dead run; the retry, the handed-back, reaped and requeued runs fire and
	// are claimed again (alike: checked with the claims), and succeed.
	w.Both(func(s *shard.Store) {
		dead, _, err := s.Dead(ctx, "default", 10, "")
		require.NoError(t, err)
		require.Len(t, dead, 1)
		require.Equal(t, "dead", dead[0].JobID)
		require.NoError(t, s.RequeueDead(ctx, dead[0].Member))
	})
	again := []string{"dead", "fail", "handback", "reap"}
	var got2, ref2 map[string]shard.Claimed
	for deadline := time.Now().Add(20 * time.Second); ; {
		w.Both(func(s *shard.Store) {
			_, err := s.FireDue(ctx, leases[s], 100, 5*time.Second)
			require.NoError(t, err)
		})
		g, r := w.ClaimAll()
		if got2 == nil {
			got2, ref2 = g, r
		} else {
			for id, c := range g {
				got2[id] = c
			}
			for id, c := range r {
				ref2[id] = c
			}
		}
		if len(got2) == len(again) && len(ref2) == len(again) {
			break
		}
		require.True(t, time.Now().Before(deadline), "claimed again: %v and %v", keys(got2), keys(ref2))
		time.Sleep(50 * time.Millisecond)
	}
	// Claimed in rounds of the loop above, a retry's time with its jitter: apart by more.
	shardtest.SameClaims(t, ref2, got2, 5*time.Second)
	w.Both(func(s *shard.Store) {
		var fin []shard.Finish
		for _, id := range again {
			c := w.Of(s, got2, ref2)[id]
			fin = append(fin, shard.Finish{Member: c.Member, Token: c.Token, Outcome: shard.Succeeded})
		}
		errs, err := s.FinishRuns(ctx, 0, fin)
		require.NoError(t, err)
		require.Equal(t, make([]error, len(again)), errs)
	})
	w.Same(ids...)
	sameListings(t, w, ids)
	sameExport(t, b, w, ids)
}

func keys(m map[string]shard.Claimed) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sameListings checks that both stores list jobs ids, with the same states, in pages of
// a few, and that the snapshot scan finds them all.
func sameListings(t *testing.T, w *shardtest.Twins, ids []string) {
	t.Helper()
	ctx := context.Background()
	listed := map[*shard.Store]map[string]job.State{}
	w.Both(func(s *shard.Store) {
		m := map[string]job.State{}
		for f := (shard.ListFilter{Limit: 3}); ; {
			page, err := s.List(ctx, f)
			require.NoError(t, err)
			for _, info := range page.Jobs {
				m[info.ID] = info.State
			}
			if page.Next == "" {
				break
			}
			f.Cursor = page.Next
		}
		listed[s] = m
		var scanned []string
		require.NoError(t, s.ScanAllJobs(ctx, func(_ shard.ID, jobIDs []string) error {
			scanned = append(scanned, jobIDs...)
			return nil
		}))
		sort.Strings(scanned)
		require.Equal(t, ids, slices.Compact(scanned))
	})
	require.Len(t, listed[w.Got], len(ids))
	require.Equal(t, listed[w.Ref], listed[w.Got])
}

// sameExport checks that the jobs of both stores, exported (ReadJobs) and restored into
// empty stores, read the same there.
func sameExport(t *testing.T, b redistest.Backend, w *shardtest.Twins, ids []string) {
	t.Helper()
	ctx := context.Background()
	restored := map[*shard.Store]*shard.Store{}
	w.Both(func(s *shard.Store) {
		recs, err := s.ReadJobs(ctx, 0, ids)
		require.NoError(t, err)
		require.Len(t, recs, len(ids))
		to := open(t, b, shard.Config{Shards: 1, Retention: time.Hour, NoPack: true})
		n, err := to.RestoreJobs(ctx, 0, recs)
		require.NoError(t, err)
		require.Equal(t, len(ids), n.Restored)
		restored[s] = to
	})
	r := &shardtest.Twins{T: t, Ref: restored[w.Ref], Got: restored[w.Got], Slack: w.Slack}
	r.Same(ids...)
}

// An existing namespace in the layout of schema v1 is refused at start-up with what to
// do, and its keys are left as they are.
func TestOpen_RefusesAnOldSchema(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		ns := redistest.Namespace(t, b)
		c := b.Client(t)
		old := ns + ":v1:meta"
		require.NoError(t, c.Do(ctx, c.B().Hset().Key(old).FieldValue().FieldValue("shards", "4").FieldValue("schema", "1").Build()).Error())
		defer c.Do(ctx, c.B().Del().Key(old).Build())
		_, err := shard.Open(ctx, c, shard.Config{Namespace: ns, Shards: 4})
		var e *shard.OldSchemaError
		require.True(t, errors.As(err, &e), "%v", err)
		require.Equal(t, 1, e.Schema)
		for _, want := range []string{"data layout v1", "uses v2", "tock snapshot export", ns + ":v1:*", "tock snapshot restore"} {
			require.ErrorContains(t, err, want)
		}
		_, _, _, err = shard.NamespaceSettings(ctx, c, ns)
		require.True(t, errors.As(err, &e), "an export says so too: %v", err)
		n, err := c.Do(ctx, c.B().Exists().Key(old).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "left as it is")
		n, err = c.Do(ctx, c.B().Exists().Key(ns+":v2:meta").Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "no v2 namespace made beside it")
	})
}

// Every key name the scripts build from a shard's prefix is the one shard.Keys builds:
// the includes declare those of their forms as constants, common's are literals.
func TestKeys_MatchTheScripts(t *testing.T) {
	t.Parallel()
	s, err := shard.LoadScripts()
	require.NoError(t, err)
	consts := map[string]string{}
	declRE := regexp.MustCompile(`(?m)^local ([A-Z_]+(?:, [A-Z_]+)*) = ((?:'[^']*'|\d+)(?:, (?:'[^']*'|\d+))*)$`)
	for _, m := range declRE.FindAllStringSubmatch(s.Library, -1) {
		names, values := strings.Split(m[1], ", "), strings.Split(m[2], ", ")
		require.Len(t, values, len(names), m[0])
		for i, n := range names {
			consts[n] = strings.Trim(values[i], "'")
		}
	}
	tags, err := shard.Tags(2)
	require.NoError(t, err)
	k := shard.NewKeys("ns", tags)
	p := k.Prefix(1)
	for key, want := range map[string]string{
		k.PackedJobs(1):          p + consts["PACKED"],
		k.PackedRuns(1):          p + consts["PACKED_RUNS"],
		k.PackedExpiry(1):        p + consts["PACKED_EXPIRY"],
		k.PackedExpiryList(1, 7): p + consts["PACKED_EXPIRY"] + ":7",
		k.Plain(1, 5, "q"):       p + consts["PLAIN"] + "5:q",
		k.PlainIndex(1):          p + consts["PLAIN_INDEX"],
		k.ColdBuckets(1):         p + consts["COLD_BUCKETS"],
		k.ColdList(1, 7):         p + consts["COLD_LIST"] + "7",
		k.ColdIndex(1, 9):        p + consts["COLD_INDEX"] + "9",
	} {
		require.Equal(t, want, key)
	}
	require.Equal(t, strconv.Itoa(shard.ColdSlots), consts["COLD_SLOTS"])
	for _, kind := range []struct{ key, lua string }{
		{k.Job(1, "x"), "'job:' .. id"}, {k.Due(1, 7), "'due:' .. "}, {k.Ready(1, "q"), "'ready:' .. "},
		{k.Stats(1), ".. 'stats'"},
	} {
		require.True(t, strings.HasPrefix(kind.key, p), kind.key)
		require.Contains(t, s.Library, kind.lua, kind.key)
	}
}

// shard.ColdSlot names the cold index the scripts file a cold job in (cold's cold_index).
func TestColdSlot_MatchesTheScripts(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, ColdAfter: time.Minute})
		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		var jobs []*job.Job
		for i := range 50 {
			jobs = append(jobs, &job.Job{ID: "cold-" + strconv.Itoa(i), Type: "t", Schedule: job.Schedule{At: now.Add(time.Hour)}})
		}
		_, err = s.Create(ctx, jobs)
		require.NoError(t, err)
		c := s.Client()
		for _, j := range jobs {
			v, err := c.Do(ctx, c.B().Hget().Key(s.Keys().ColdIndex(0, shard.ColdSlot(j.ID))).Field(j.ID).Build()).ToString()
			require.NoError(t, err, j.ID)
			require.NotEmpty(t, v, j.ID)
		}
	})
}
