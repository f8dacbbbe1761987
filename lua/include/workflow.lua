-- workflow: a workflow's state on its shard, and how the end of one node moves its
-- children in the same call (no loop scans workflows). A workflow's nodes are jobs whose
-- ids are the workflow id, '@' and the node id (job.NodeJobID); ordinary job ids have no
-- '@', and shard.Of routes an id with one by what precedes its first '@', so a workflow,
-- its nodes and (for a scheduled one) its definition share one shard.
--
--   P..'wf:'..wf   HASH  the workflow:
--     'st'     running | succeeded | failed | cancelled
--     'dh'     definition hash (compared by the caller, as for jobs)
--     'cr'     created ms;  'en' ended ms (when it ended)
--     'n'      nodes;  'left' nodes not ended;  'bad' nodes failed, cancelled or
--              upstream_failed
--     'nodes'  the node ids in submission order, comma separated
--     'ov'     a scheduled instance's overlap policy (retry_workflow checks it)
--     'hold'   '1' while a buffered instance waits for its definition's active one
--              (overlap buffer_one): its roots are released when that one ends
--     'dd'     an ended workflow's nodes whose runs are in the dead-letter set, while
--              there are any: it has no expiry meanwhile (wf_finished, wf_dead_deleted)
--     's:'..n  node n's state, wf_get's form: "state|rule|np|ok|bad|skip|rel|end|att"
--              state   waiting (its rule undecided), released (its job runs its course:
--                      the job says ready, running or retrying), succeeded, failed,
--                      cancelled, upstream_failed, skipped
--              rule    all_success | all_done | one_success | one_failed | none_failed
--              np      parents; ok, bad, skip: parents that ended succeeded, not
--                      succeeded (failed, cancelled, upstream_failed), skipped, counted
--                      while the node waits (once it is decided they may also count
--                      the other parents that ended in the call: wf_mark_many)
--              rel     when it was released (ms), end when it ended, att its attempts
--     'p:'..n  its parents, comma separated ('' for a root)
--     'c:'..n  its children, comma separated
--     'x:'..n  the result of a succeeded node
--   P..'stats'     'w:created', 'w:retried' and 'w:<end state>' count workflows started
--                  and ended on the shard (the caller flushes them: flush_stats)
--   P..'wfd:'..def HASH  a scheduled workflow's instances: 'act' the running instances
--                        (",i1,i2,"), 'bf' the buffered one (overlap buffer_one). It
--                        exists only while it holds one (wf_definition_set deletes it
--                        empty), so a deleted definition's goes when its last instance
--                        ends; delete_job deletes an empty one a definition left
--
-- A node's job is made 'waiting' (no run: packed without a due time, or a job hash) and
-- gets its one run when released (wf_release). A node that will not run ends its job
-- 'cancelled' with a history entry saying why. A workflow hash expires `retention` after
-- the workflow ends, never before its nodes' jobs (which expire `retention` after each
-- ends; a dead one only once its dead run is deleted: 'dd').
--- @include "common"
--- @include "packed"

local WF_NODE = '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$'

local function wf_get(v)
  local st, rule, np, ok, bad, skip, rel, en, att = string.match(v or '', WF_NODE)
  if not st then
    return nil
  end
  return { st = st, rule = rule, np = tonumber(np) or 0, ok = tonumber(ok) or 0, bad = tonumber(bad) or 0,
    skip = tonumber(skip) or 0, rel = rel, en = en, att = att }
end

-- wf_int formats a count (a node's parents, attempts): the small ones, which are most,
-- from a cache (formatting a number costs more than the rest of a node's state).
local wfInts = {}
local function wf_int(n)
  local s = wfInts[n]
  if not s then
    s = num(n)
    if n >= 0 and n < 1024 then
      wfInts[n] = s
    end
  end
  return s
end

-- wf_num parses a count as stored (wf_int's form; '' is 0): the small ones from a
-- cache (tonumber goes through the C library's strtod).
local wfNums = {}
local function wf_num(s)
  local n = wfNums[s]
  if not n then
    n = tonumber(s) or 0
    if s and n >= 0 and n < 1024 then
      wfNums[s] = n
    end
  end
  return n
end

local function wf_pack(n)
  return n.st .. '|' .. n.rule .. '|' .. wf_int(n.np) .. '|' .. wf_int(n.ok) .. '|' .. wf_int(n.bad) .. '|' ..
    wf_int(n.skip) .. '|' .. n.rel .. '|' .. n.en .. '|' .. n.att
end

-- wf_split returns the workflow id and the node id of a node's job id, nil for any other.
local function wf_split(id)
  return string.match(id, '^(.+)@([^@]+)$')
end

-- wf_decide_by applies rule to a node's np parents' outcomes so far (ok, bad and skip of
-- them ended so: wf_category): 'run', a final state ('upstream_failed' or 'skipped')
-- when the rule can no longer be met, or nil to wait.
local function wf_decide_by(rule, np, ok, bad, skip)
  local done = ok + bad + skip
  if np == 0 then
    return 'run'
  end
  if rule == 'all_done' then
    return done == np and 'run' or nil
  elseif rule == 'one_success' then
    if ok > 0 then
      return 'run'
    end
    if done == np then
      return bad > 0 and 'upstream_failed' or 'skipped'
    end
  elseif rule == 'one_failed' then
    if bad > 0 then
      return 'run'
    end
    if done == np then
      return 'skipped'
    end
  elseif rule == 'none_failed' then
    if bad > 0 then
      return 'upstream_failed'
    end
    if done == np then
      return 'run'
    end
  else -- all_success
    if bad > 0 then
      return 'upstream_failed'
    end
    -- A skipped parent decides only once every parent ended: a later failure makes the
    -- node upstream_failed, whatever the order the parents end in.
    if done == np then
      return skip > 0 and 'skipped' or 'run'
    end
  end
  return nil
end

-- wf_decide is wf_decide_by for node n (wf_get's form).
local function wf_decide(n)
  return wf_decide_by(n.rule, n.np, n.ok, n.bad, n.skip)
end

-- wf_release_many gives node jobs ids their one run, due now, each unless its job is not
-- waiting. A node's job waits packed (create_workflow): those are given their due time
-- where they are, together (packed_release); any other (a workflow not packed, a
-- priority that is no digit, a retried node with its history) is a job hash, made ready.
local function wf_release_many(P, ids, nowStr)
  if #ids == 0 then
    return
  end
  local qs, prs = packed_release(P, ids, nowStr)
  for k, id in ipairs(ids) do
    if qs[k] then
      new_run(id, nowStr, qs[k], prs[k])
    else
      local jobKey = P .. 'job:' .. id
      local j = redis.call('HMGET', jobKey, 'st', 'q', 'pr')
      if j[1] == 'waiting' then
        new_run(id, nowStr, j[2], j[3])
        redis.call('HSET', jobKey, 'st', 'ready', 'nx', '0', 'rl', ',' .. nowStr .. ',')
      end
    end
  end
end

-- wf_release is wf_release_many for one node job.
local function wf_release(P, id, nowStr)
  wf_release_many(P, { id }, nowStr)
end

-- wf_end_job ends a node's job that will not run (still waiting, no run): cancelled,
-- with a history entry that says why, expiring after retention.
local function wf_end_job(P, id, why, now, keep, retention)
  local jobKey = P .. 'job:' .. id
  -- A job that waits packed (create_workflow) becomes the job hash it stands for.
  packed_thaw(P, id)
  if redis.call('HGET', jobKey, 'st') ~= 'waiting' then
    return
  end
  local h = hist_push(redis.call('HGET', jobKey, 'h'), keep, { d = now, e = now, o = 'cancelled', er = why })
  redis.call('HSET', jobKey, 'st', 'cancelled', 'rl', ',', 'h', h)
  redis.call('PEXPIRE', jobKey, retention)
end

-- wf_hmget reads fields of hash key at once (in chunks: Lua's stack holds some thousands
-- of values).
local function wf_hmget(key, fields)
  if #fields == 0 then
    return {}
  elseif #fields <= 1000 then
    return redis.call('HMGET', key, unpack(fields))
  end
  local out = {}
  for k = 1, #fields, 1000 do
    local got = redis.call('HMGET', key, unpack(fields, k, math.min(k + 999, #fields)))
    for g = 1, #got do
      out[k + g - 1] = got[g]
    end
  end
  return out
end

-- wf_hset writes the field/value pairs of list kv to hash key (in chunks, as wf_hmget).
local function wf_hset(key, kv)
  for k = 1, #kv, 2000 do
    redis.call('HSET', key, unpack(kv, k, math.min(k + 1999, #kv)))
  end
end

-- wf_dead_count returns how many nodes of workflow wf (hash wk) have a run in the
-- dead-letter set: nodes that failed and whose jobs are dead without an expiry (deleting
-- the dead run gives the job one: delete_dead). A dead job never expires by itself: the
-- dead-letter set is the user's to clear, here by a retry of the workflow or a delete
-- of the run, so the workflow stays as long: wf_finished counts them once, in 'dd', and
-- wf_dead_deleted counts them down (a delete is no scan of a large workflow's nodes).
local function wf_dead_count(P, wk, wf)
  local names, fields = {}, {}
  for node in string.gmatch(redis.call('HGET', wk, 'nodes') or '', '[^,]+') do
    names[#names + 1], fields[#fields + 1] = node, 's:' .. node
  end
  local states, dead = wf_hmget(wk, fields), 0
  for k, node in ipairs(names) do
    if string.sub(states[k] or '', 1, 7) == 'failed|' then
      local jobKey = P .. 'job:' .. wf .. '@' .. node
      if redis.call('HGET', jobKey, 'st') == 'dead' and redis.call('PTTL', jobKey) == -1 then
        dead = dead + 1
      end
    end
  end
  return dead
end

-- wf_key returns the key of node job id's workflow and the workflow's id; nil for a job
-- that is no node.
local function wf_key(P, id)
  local wf = wf_split(id)
  if wf then
    return P .. 'wf:' .. wf, wf
  end
end

-- wf_expire_no_earlier gives workflow hash wk, which has ttl ms left (PTTL: -1 no
-- expiry, -2 gone), retention ms when it would expire earlier; one without an expiry (a
-- running workflow, or one kept for dead runs) or gone changes nothing.
local function wf_expire_no_earlier(wk, ttl, retention)
  if ttl >= 0 and ttl < tonumber(retention) then
    redis.call('PEXPIRE', wk, retention)
  end
end

-- wf_outlive keeps the hash of node job id's workflow, once it ended (it has an expiry
-- then), until at least its job expires, which is retention from now: the job of a node
-- whose run was cancelled while it ran (cancel_workflow, cancel_job) is given its expiry
-- again when that run's report comes, after its workflow may have ended. A job that is
-- no node, or whose workflow runs (no expiry) or is gone, changes nothing.
local function wf_outlive(P, id, retention)
  local wk = wf_key(P, id)
  if wk then
    wf_expire_no_earlier(wk, redis.call('PTTL', wk), retention)
  end
end

-- wf_dead_deleted follows a delete of node job id's dead run (delete_dead), which gives
-- the job its expiry, retention from now: its workflow, once it ended, expires no
-- earlier, and kept without an expiry while nodes' runs were dead (wf_finished's 'dd'),
-- expires then unless another node's run still is.
local function wf_dead_deleted(P, id, retention)
  local wk, wf = wf_key(P, id)
  if not wk then
    return
  end
  local ttl = redis.call('PTTL', wk)
  if ttl ~= -1 then
    wf_expire_no_earlier(wk, ttl, retention)
    return
  end
  local w = redis.call('HMGET', wk, 'en', 'dd')
  if not w[1] then
    return
  end
  -- Without 'dd' (none should be), the nodes are counted.
  local left = w[2] and tonumber(w[2]) - 1 or wf_dead_count(P, wk, wf)
  if left > 0 then
    redis.call('HSET', wk, 'dd', left)
  else
    redis.call('HDEL', wk, 'dd')
    redis.call('PEXPIRE', wk, retention)
  end
end

-- wf_category is how a node's end counts for its children's rules.
local function wf_category(st)
  if st == 'succeeded' then
    return 'ok'
  elseif st == 'skipped' then
    return 'skip'
  end
  return 'bad'
end

-- wf_hold_release releases the nodes of a held (buffered) instance whose rule is met: its
-- roots, and any node whose parents ended while it was held (wf_mark_many).
local function wf_hold_release(P, wk, wf, nowStr)
  redis.call('HDEL', wk, 'hold')
  for node in string.gmatch(redis.call('HGET', wk, 'nodes') or '', '[^,]+') do
    local f = 's:' .. node
    local n = wf_get(redis.call('HGET', wk, f))
    if n and n.st == 'waiting' and wf_decide(n) == 'run' then
      n.st, n.rel = 'released', nowStr
      redis.call('HSET', wk, f, wf_pack(n))
      wf_release(P, wf .. '@' .. node, nowStr)
    end
  end
end

-- wf_definition_set writes a definition's running instances act and buffered one bf to
-- its hash dk, or deletes the hash when it holds neither: the hash lives while the
-- definition has instances, so that a deleted definition's goes with its last one.
local function wf_definition_set(dk, act, bf)
  if runs_active(act) or (bf and bf ~= '') then
    redis.call('HSET', dk, 'act', act, 'bf', bf or '')
  else
    redis.call('DEL', dk)
  end
end

-- wf_end_state is the state a workflow of state st (its 'st') ends in, bad of its nodes
-- failed, cancelled or upstream_failed: cancelled when it was cancelled, failed when
-- bad is above 0, else succeeded.
local function wf_end_state(st, bad)
  if st == 'running' then
    return bad > 0 and 'failed' or 'succeeded'
  end
  return st
end

-- wf_finished ends workflow wf, every node of which has ended (wf_end_state). A
-- scheduled instance leaves its definition's active set, and the buffered instance, if
-- any, starts; the definition's hash goes once it holds no instance (its definition may
-- have been deleted meanwhile: none is made again). A caller that wrote its end state
-- and time already (wf_mark_many) passes the state as st.
local function wf_finished(P, wk, wf, now, nowStr, retention, st)
  if not st then
    local w = redis.call('HMGET', wk, 'st', 'bad')
    st = wf_end_state(w[1], tonumber(w[2]) or 0)
    redis.call('HSET', wk, 'st', st, 'en', nowStr)
  end
  -- A workflow whose nodes' runs are dead stays while one is (wf_dead_count): a failed
  -- one, or one cancelled after such a node failed (a succeeded one has no failed node).
  local dead = st ~= 'succeeded' and wf_dead_count(P, wk, wf) or 0
  if dead > 0 then
    redis.call('HSET', wk, 'dd', dead)
  else
    redis.call('PEXPIRE', wk, retention)
  end
  -- P..'stats' 'w:<state>': workflows ended (shard.Store.WorkflowCounts).
  stat('w', st, 1)
  -- Only a scheduled instance has an '@' (found without a pattern: most have none).
  local def = string.find(wf, '@', 1, true) and string.match(wf, '^([^@]+)@')
  if def then
    local dk = P .. 'wfd:' .. def
    local d = redis.call('HMGET', dk, 'act', 'bf')
    local act, bf = rl_del(d[1] or ',', wf), d[2] or ''
    if bf == wf then
      -- The buffered instance itself ended (cancelled before it started, or its nodes'
      -- jobs were): it is held no more.
      bf = ''
      redis.call('HDEL', wk, 'hold')
    elseif bf ~= '' and not runs_active(act) then
      act = rl_add(act, bf)
      wf_hold_release(P, P .. 'wf:' .. bf, bf, nowStr)
      bf = ''
    end
    wf_definition_set(dk, act, bf)
  end
end

-- wf_write sets field f of a workflow's pending writes (field, value, ... in writes;
-- pending: field -> where writes holds its value) to value.
local function wf_write(writes, pending, f, value)
  local at = pending[f]
  if not at then
    at = #writes + 2
    writes[at - 1] = f
    pending[f] = at
  end
  writes[at] = value
end

-- wf_count counts, for each of the children (a node's 'c:' field), one more parent that
-- ended as cat (wf_category) in counts (child -> { ok, bad, skip }), listing in kids the
-- children it counts first.
local function wf_count(kids, counts, children, cat)
  -- Cut at the commas (a gmatch iterator costs more, and most nodes have one child).
  local from, find, sub = 1, string.find, string.sub
  while from <= #children do
    local comma = find(children, ',', from, true)
    local child = sub(children, from, (comma or 0) - 1)
    from = comma and comma + 1 or #children + 1
    if child ~= '' then
      local c = counts[child]
      if not c then
        c = { ok = 0, bad = 0, skip = 0 }
        counts[child] = c
        kids[#kids + 1] = child
      end
      c[cat] = c[cat] + 1
    end
  end
end

-- WF_WAITING matches a waiting node's state (wf_get's form), capturing its other parts.
local WF_WAITING = '^waiting|([^|]*)|(%d*)|(%d*)|(%d*)|(%d*)|([^|]*)|([^|]*)|([^|]*)$'

-- wf_own_end returns node state v (wf_get's form) ended as st at nowStr after att
-- attempts (a number, a string, or false: those of v), or nil when v is no state of a
-- node that has not ended (waiting or released): only its state, end and attempts change.
local function wf_own_end(v, st, nowStr, att)
  local cur, mid, oldAtt = string.match(v or '', '^([^|]*)|(.*)|[^|]*|([^|]*)$')
  if cur ~= 'waiting' and cur ~= 'released' then
    return nil
  end
  return st .. '|' .. mid .. '|' .. nowStr .. '|' .. (att and (type(att) == 'number' and wf_int(att) or att) or oldAtt)
end

-- wf_held reports whether workflow wf (hash wk) is a held instance (overlap buffer_one;
-- only an instance of a definition, whose id has an '@', can be): it runs no node, and
-- one whose rule is met waits until the instance starts (wf_hold_release).
local function wf_held(wk, wf)
  return string.find(wf, '@', 1, true) ~= nil and redis.call('HGET', wk, 'hold') == '1'
end

-- wf_mark_many ends nodes of workflow wf (hash wk), ends a list of node, state, result
-- (a succeeded node's, may be false), attempts (false: kept), ... (4 values a node),
-- each unless it ended already,
-- and moves their descendants: a child whose rule is met is released, one whose rule can
-- no longer be met ends at once (and so on down). The nodes end together: a child counts
-- all of its parents among them before its rule is applied, which decides as applying it
-- after each would (the rules are decided the same whatever the order the parents end
-- in). Returns how many of them ended now. With rel (a list), the jobs of the children
-- to release are added to it, for the caller to release (wf_release_many); without,
-- they are released at once.
--
-- It runs at every node's end, so it makes few calls, however many nodes of a workflow
-- one call ends (a fan-out's parents acked together): the nodes' states and children
-- and the nodes left in one read, the children's states in one, and every state and
-- count written in one write at the end (a state changed during the call is read from
-- what will be written). The workflow's state and failed nodes are read only when it
-- ends or a node failed (every field read costs as much as a few string operations).
local function wf_mark_many(P, wk, wf, ends, now, nowStr, keep, retention, rel)
  local fields = { 'left' }
  for k = 1, #ends, 4 do
    fields[#fields + 1], fields[#fields + 2] = 's:' .. ends[k], 'c:' .. ends[k]
  end
  local v = wf_hmget(wk, fields)
  local writes, pending = {}, {} -- field, value, ...; field -> where writes holds its value
  local bad, ended, marked = 0, 0, 0
  -- The children to move, in order, and per child how many of its parents ended now, by
  -- how each end counts (wf_category).
  local kids, counts = {}, {}
  -- Whether the workflow is held, read at the first child whose rule is met.
  local held = nil
  local n = 0
  for k = 1, #ends, 4 do
    local node, st, result, att = ends[k], ends[k + 1], ends[k + 2], ends[k + 3]
    n = n + 1
    local fs = fields[2 * n]
    local at = pending[fs]
    -- Only the node's own state, its end and its attempts change: the rest is kept as is.
    local own = wf_own_end(at and writes[at] or v[2 * n], st, nowStr, att)
    if own then
      wf_write(writes, pending, fs, own)
      if result and st == 'succeeded' then
        -- Its children are claimed after this call: they find it.
        wf_write(writes, pending, 'x:' .. node, result)
      end
      marked, ended = marked + 1, ended + 1
      local cat = wf_category(st)
      if cat == 'bad' then
        bad = bad + 1
      end
      wf_count(kids, counts, v[2 * n + 1] or '', cat)
    end
  end
  -- Level by level: the children counted, then those of the children that ended because
  -- of them (rarely any).
  while kids and #kids > 0 do
    local names, tally = kids, counts
    kids, counts = nil, nil
    -- The children's fields, and the states of those not written in this call (where
    -- writes holds the others'), read at once.
    local fs, at, read = {}, {}, {}
    for c, child in ipairs(names) do
      local f = 's:' .. child
      fs[c], at[c] = f, pending[f]
      if not at[c] then
        read[#read + 1] = f
      end
    end
    local got, r = wf_hmget(wk, read), 0
    for c, child in ipairs(names) do
      local f, cur = fs[c], nil
      if at[c] then
        cur = writes[at[c]]
      else
        r = r + 1
        cur = got[r]
      end
      -- A waiting child's state (wf_get's form, decoded here without its table: this runs
      -- for every child of every node that ends).
      local rule, np, ok, cbad, skip, relAt, en, att = string.match(cur or '', WF_WAITING)
      if rule then
        local t = tally[child]
        np, ok = wf_num(np), wf_num(ok) + t.ok
        cbad, skip = wf_num(cbad) + t.bad, wf_num(skip) + t.skip
        local d = wf_decide_by(rule, np, ok, cbad, skip)
        if d == 'run' and held == nil then
          held = wf_held(wk, wf)
        end
        local counted = rule .. '|' .. wf_int(np) .. '|' .. wf_int(ok) .. '|' .. wf_int(cbad) .. '|' ..
          wf_int(skip) .. '|'
        local state
        if not d or (d == 'run' and held) then
          state = 'waiting|' .. counted .. relAt .. '|' .. en .. '|' .. att
        elseif d == 'run' then
          state = 'released|' .. counted .. nowStr .. '|' .. en .. '|' .. att
          if rel then
            rel[#rel + 1] = wf .. '@' .. child
          else
            wf_release(P, wf .. '@' .. child, nowStr)
          end
        else
          state = d .. '|' .. counted .. relAt .. '|' .. nowStr .. '|' .. att
          ended = ended + 1
          if d == 'upstream_failed' then
            bad = bad + 1
          end
          wf_end_job(P, wf .. '@' .. child, d == 'skipped' and 'skipped: its rule ' .. rule .. ' can no longer be met'
            or 'upstream failed: its rule ' .. rule .. ' can no longer be met', now, keep, retention)
          if not kids then
            kids, counts = {}, {}
          end
          wf_count(kids, counts, redis.call('HGET', wk, 'c:' .. child) or '', wf_category(d))
        end
        wf_write(writes, pending, f, state)
      end
    end
  end
  if marked == 0 then
    return 0
  end
  local left = wf_num(v[1]) - ended
  wf_write(writes, pending, 'left', wf_int(left))
  local w
  if bad > 0 or left <= 0 then
    w = redis.call('HMGET', wk, 'bad', 'st')
  end
  if bad > 0 then
    bad = bad + wf_num(w[1])
    wf_write(writes, pending, 'bad', wf_int(bad))
  end
  local fin
  if left <= 0 then
    fin = wf_end_state(w[2], bad > 0 and bad or wf_num(w[1]))
    wf_write(writes, pending, 'st', fin)
    wf_write(writes, pending, 'en', nowStr)
  end
  wf_hset(wk, writes)
  if fin then
    wf_finished(P, wk, wf, now, nowStr, retention, fin)
  end
  return marked
end

-- wf_keep_result writes a succeeded node's result, if any (wf_mark_one).
local function wf_keep_result(wk, node, result)
  if result then
    redis.call('HSET', wk, 'x:' .. node, result)
  end
end

-- wf_mark_one is wf_mark_many for the commonest end, taken without its tables: one node
-- of the workflow succeeded in the call, and it has one child, which its end releases or
-- leaves waiting (a chain's node, a fan-in's parent ended alone), or none (the workflow
-- may end). It reads what wf_mark_many reads and writes what it writes, or returns nil
-- before writing anything for any other end (the caller then calls wf_mark_many); else
-- 1 (the node ended now).
local function wf_mark_one(P, wk, wf, node, st, result, att, now, nowStr, retention, rel)
  if st ~= 'succeeded' then
    return nil
  end
  local fs = 's:' .. node
  local v = redis.call('HMGET', wk, 'left', fs, 'c:' .. node)
  local child = v[3] or ''
  local left = wf_num(v[1]) - 1
  if string.find(child, ',', 1, true) or (left <= 0 and child ~= '') then
    return nil
  end
  local own = wf_own_end(v[2], st, nowStr, att)
  if not own then
    return nil
  end
  -- Written without a table of writes (a table grown value by value costs as much as a
  -- field read): the result, if any, on its own, once nothing falls back.
  if left <= 0 then
    -- The workflow's last node: it ends (wf_end_state).
    local w = redis.call('HMGET', wk, 'bad', 'st')
    local fin = wf_end_state(w[2], wf_num(w[1]))
    wf_keep_result(wk, node, result)
    redis.call('HSET', wk, fs, own, 'left', '0', 'st', fin, 'en', nowStr)
    wf_finished(P, wk, wf, now, nowStr, retention, fin)
    return 1
  end
  if child == '' then
    -- A leaf, and other nodes have not ended.
    wf_keep_result(wk, node, result)
    redis.call('HSET', wk, fs, own, 'left', wf_int(left))
    return 1
  end
  local cf = 's:' .. child
  local rule, np, ok, cbad, skip, relAt, en, catt = string.match(redis.call('HGET', wk, cf) or '', WF_WAITING)
  if not rule then
    -- Not waiting (its job was cancelled): nothing to decide.
    wf_keep_result(wk, node, result)
    redis.call('HSET', wk, fs, own, 'left', wf_int(left))
    return 1
  end
  np, ok, cbad, skip = wf_num(np), wf_num(ok) + 1, wf_num(cbad), wf_num(skip)
  local d = wf_decide_by(rule, np, ok, cbad, skip)
  if d and d ~= 'run' then
    -- The child ends too (one_failed): wf_mark_many moves its descendants.
    return nil
  end
  wf_keep_result(wk, node, result)
  -- Each state built in one concatenation (a part built first is one more string).
  local state
  if d == 'run' and not wf_held(wk, wf) then
    state = 'released|' .. rule .. '|' .. wf_int(np) .. '|' .. wf_int(ok) .. '|' .. wf_int(cbad) .. '|' ..
      wf_int(skip) .. '|' .. nowStr .. '|' .. en .. '|' .. catt
    rel[#rel + 1] = wf .. '@' .. child
  else
    state = 'waiting|' .. rule .. '|' .. wf_int(np) .. '|' .. wf_int(ok) .. '|' .. wf_int(cbad) .. '|' ..
      wf_int(skip) .. '|' .. relAt .. '|' .. en .. '|' .. catt
  end
  redis.call('HSET', wk, fs, own, cf, state, 'left', wf_int(left))
  return 1
end

-- wf_mark_ends moves workflow wf (hash wk) for its node ends of one call (wf_mark_many's
-- ends): wf_mark_one when it takes them, else wf_mark_many.
local function wf_mark_ends(P, wk, wf, ends, now, nowStr, keep, retention, rel)
  if #ends ~= 4 or not wf_mark_one(P, wk, wf, ends[1], ends[2], ends[3], ends[4], now, nowStr, retention, rel) then
    wf_mark_many(P, wk, wf, ends, now, nowStr, keep, retention, rel)
  end
end

-- wf_mark ends node `node` of workflow wf as st (wf_mark_many). Returns true when the
-- node ended now.
local function wf_mark(P, wk, wf, node, st, now, nowStr, keep, retention, att, result)
  return wf_mark_many(P, wk, wf, { node, st, result or false, att or false }, now, nowStr, keep, retention) > 0
end

-- wf_node_end records that node job id's run ended (st: succeeded, failed or cancelled)
-- after att attempts, with result (a succeeded node's, may be nil), and moves its
-- workflow. A job that is no node, or whose node ended already, changes nothing.
local function wf_node_end(P, id, st, result, att, now, nowStr, keep, retention)
  local wf, node = wf_split(id)
  if not wf then
    return
  end
  wf_mark(P, P .. 'wf:' .. wf, wf, node, st, now, nowStr, keep, retention, att, result)
end

-- wf_ends returns an empty collection of node ends for wf_end_later (finish_runs keeps
-- one a call): the workflows in the order they first ended, and per workflow its ends.
local function wf_ends()
  return { order = {}, by = {} }
end

-- wf_end_later records in ends, as wf_node_end does at once, that node job id's run
-- ended, for wf_flush_ends: the ends of one call that belong to one workflow then take
-- one wf_mark_many. A job that is no node is left out.
local function wf_end_later(ends, id, st, result, att)
  local wf, node = wf_split(id)
  if not wf then
    return
  end
  local list = ends.by[wf]
  if not list then
    -- Made whole at once (a table grown value by value is made again at each power of 2).
    ends.by[wf] = { node, st, result or false, att or false }
    ends.order[#ends.order + 1] = wf
    return
  end
  local k = #list
  list[k + 1], list[k + 2], list[k + 3], list[k + 4] = node, st, result or false, att or false
end

-- wf_flush_ends moves the workflows of the node ends collected in ends, one wf_mark_many
-- each, in the order they first ended, and empties it. The children they release are
-- released together at the end (wf_release_many). A workflow whose move fails (a bug)
-- does not stop the others: the call files the ends of all of its runs (finish_runs'
-- done: they leave the in-flight set, packed ones succeed), so a workflow left unmoved
-- would wait for ever for nodes that will not end again. The failed one's states are
-- not written (wf_mark_many writes them at its end), nor are its children released; the
-- first error is raised after the others are moved and their children released.
local function wf_flush_ends(ends, P, now, nowStr, keep, retention)
  local order, by = ends.order, ends.by
  ends.order, ends.by = {}, {}
  local rel, failure = {}, nil
  for _, wf in ipairs(order) do
    local before = #rel
    local ok, err = pcall(wf_mark_ends, P, P .. 'wf:' .. wf, wf, by[wf], now, nowStr, keep, retention, rel)
    if not ok then
      for k = #rel, before + 1, -1 do
        rel[k] = nil
      end
      failure = failure or err
    end
  end
  wf_release_many(P, rel, nowStr)
  if failure then
    error(failure, 0)
  end
end
