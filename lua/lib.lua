-- lib.lua: the key layout and the helpers every lock script shares. The loader
-- (lua.go) puts the settings on the lines before this file and each operation
-- after it, as a function of (KEYS, ARGV): one Redis Functions library loaded
-- once, or, where the server has no FUNCTION (the embedded store), one EVAL
-- script per operation with this file ahead of it.
--
-- KEYS[1] of every lock script is P:{N} (prefix P, lock name N); every other
-- key it touches is derived from it and shares its hash slot:
--
--   P:{N}            the lock: one string, its only key once nothing holds or
--                    waits, 'f|w|qe|n|l|m|sx|x' (an empty part: none):
--     f              the last fence issued
--     w              until when (Redis ms) some gateway waits for news of this
--                    lock: 'r', 'c', 'i:' and 'w:' messages are published only
--                    until then ('g:' messages always)
--     qe             until when the queue may hold live tickets
--     n, l, m, sx    shared holds: how many, their limit ('0': none), and
--                    bounds of the earliest and the latest of their deadlines
--     x              the exclusive hold (a hold record, below)
--                    Every write sets the key's expiry (SET PX) to what must
--                    keep it: FENCE_GUARD_MS after the last grant (the fence
--                    guard), and every hold's and ticket's deadline.
--   P:{N}:s, P:{N}:h shared holds, while there are any: lease hash -> deadline
--                    (a sorted set, to find those that ran out) and lease hash
--                    -> hold record
--   P:{N}:q          the queue: ticket hash -> arrival sequence, while queued
--   P:{N}:t:<th>     a ticket: lh (the lease hash it is granted under), ttl,
--                    owner, tt (ticket ttl), by, sh ('1' shared), lim, ik, mk,
--                    sd/ss/sm (its session's, as for holds), q:<poll id> (each
--                    poll in flight: its deadline); PEXPIRE = its life
--   P:{N}:i:<ik>     an Idempotency-Key's record: b (body hash), k ('h' a hold,
--                    't' a ticket, 'r' a re-entry), h (its hash), m (the maker:
--                    the request that made it); lives while what it made lives,
--                    and GRACE_MS after
--   P:{N}:ev         the channel: 'r' (a hold ended, nobody queued), 'c' (the
--                    holds changed), 'i:<lh>' (an idempotent request was granted:
--                    its duplicates answer), 'w:<ms>' (a hold ends sooner than
--                    announced) and
--                    'g:<th>:<fence>:<at>:<window>:<polls>:<shared 1|0>:<limit>:<owner>'
--                    (granted to ticket th; polls '1,<poll id>,...' when made at
--                    the full ttl for the polls in flight, '0' when kept
--                    unclaimed for the ticket's next poll)
--
-- A hold record is one string, tab-separated (a label never holds a control
-- character): lh, d (deadline, Redis ms), c (count), f (fence), ttl (of the
-- last grant or renewal), at (grant time), by (the principal), told ('1' once
-- an answer other than its maker's handed it out: a replay, a re-entry, a
-- renewal, a session's look; no undo ends it then; 'f' once its maker's answer
-- failed while other answers had it), tk (the ticket hash while a handoff
-- waits for its claim), pc (the other answers it was handed to, by id, comma-
-- separated: each whose client did not get it takes itself out; a hold left
-- with none, and no maker's answer, ends, or a grant waits for a claim again),
-- mk (the request that made it),
-- ik (its Idempotency-Key record), sd, ss, sm (a session's hold: the
-- session's deadline, hash and member), lim (shared: its limit; '' exclusive),
-- owner. A hold lives while Redis time <= d: expiry runs no script, so every
-- script drops what has expired before it decides.
--
-- Numbers above 2^31 travel as strings: Lua numbers are doubles, and tostring
-- would print them in exponent form.

local lock, shset, shrec, queue, tprefix, iprefix, chan, derived

-- bind points the helpers at the lock of KEYS[1]. The names derived from it
-- are made only when a helper needs them (derive): an uncontended grant or
-- release needs none.
local function bind(k)
  lock, derived = k, false
end

local function derive()
  if not derived then
    derived = true
    shset, shrec, queue, tprefix, iprefix, chan = lock .. ':s', lock .. ':h', lock .. ':q', lock .. ':t:',
      lock .. ':i:', lock .. ':ev'
  end
end

-- ticket_key is the key of the lock's ticket th.
local function ticket_key(th)
  derive()
  return tprefix .. th
end

-- str prints an integer (a time, a fence: below 2^53) in full: '%d' is an
-- integer conversion, far cheaper than '%.0f', and tostring would print it in
-- exponent form.
local function str(n)
  return string.format('%d', n)
end

local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- expired reports a call that reached Redis after its "not after" (Redis ms):
-- it must change nothing, since its gateway may already have decided what its
-- unknown outcome meant.
local function expired(now, not_after)
  return now > tonumber(not_after)
end

local REC -- the record's pattern; made on first use (a library's load sees no string library)

local function unpack_hold(v)
  if not v then
    return nil
  end
  REC = REC or '^' .. string.rep('([^\t]*)\t', 16) .. '(.*)$'
  local lh, d, c, f, ttl, at, by, told, tk, pc, mk, ik, sd, ss, sm, lim, owner = string.match(v, REC)
  -- (One constructor: the table is made at its size, not grown field by field.)
  return {lh = lh, d = tonumber(d), c = tonumber(c), f = f, ttl = tonumber(ttl), at = at, by = by, told = told,
    tk = tk, pc = pc, mk = mk, ik = ik, sd = sd, ss = ss, sm = sm, lim = lim, owner = owner, shared = lim ~= ''}
end

-- pack_hold is a hold's record. (One concatenation: no table, one string made.)
local function pack_hold(h)
  return h.lh .. '\t' .. str(h.d) .. '\t' .. str(h.c) .. '\t' .. h.f .. '\t' .. str(h.ttl) .. '\t' .. h.at .. '\t' ..
    h.by .. '\t' .. h.told .. '\t' .. h.tk .. '\t' .. h.pc .. '\t' .. h.mk .. '\t' .. h.ik .. '\t' .. h.sd .. '\t' ..
    h.ss .. '\t' .. h.sm .. '\t' .. h.lim .. '\t' .. h.owner
end

local LOCK -- the lock string's pattern; made on first use

-- The lock's string is read once per call into L, and written back (flush)
-- when a script changed it (L.dirty).
local function load(now)
  local v = redis.pcall('GET', lock)
  if type(v) == 'table' and v.err then
    -- Not a string: the lock of an earlier version of Baton (a hash). Its
    -- gateways must be stopped before this version starts (README:
    -- upgrading); what they left is dropped. Fences still grow: the time floor
    -- is above every fence they issued.
    redis.call('DEL', lock)
    v = false
  end
  if not v then
    return {f = 0, w = 0, qe = 0, n = 0, l = '0', m = 0, sx = 0, x = false, q = false, dirty = false}
  end
  LOCK = LOCK or '^' .. string.rep('([^|]*)|', 7) .. '(.*)$'
  local f, w, qe, n, l, m, sx, x = string.match(v, LOCK)
  local hold = false
  if x ~= '' then
    hold = unpack_hold(x)
  end
  qe = tonumber(qe) or 0
  -- (One constructor: the table is made at its size, not grown field by field.)
  return {f = tonumber(f) or 0, w = tonumber(w) or 0, qe = qe, n = tonumber(n) or 0, l = l, m = tonumber(m) or 0,
    sx = tonumber(sx) or 0, x = hold, q = qe >= now, dirty = false}
end

local function num(n)
  if n == 0 then
    return ''
  end
  return str(n)
end

-- flush writes the lock back, living as long as something needs it: the fence
-- guard after the last grant, its holds, its queue.
local function flush(L, now)
  if not L.dirty then
    return
  end
  local until_ms = math.floor(L.f / 1000) + FENCE_GUARD_MS
  local x = ''
  if L.x then
    x = pack_hold(L.x)
    until_ms = math.max(until_ms, L.x.d)
  end
  local l = ''
  if L.n > 0 then
    l = L.l
    until_ms = math.max(until_ms, L.sx)
  end
  if L.q then
    until_ms = math.max(until_ms, L.qe)
  end
  redis.call('SET', lock, table.concat({num(L.f), num(L.w), num(L.q and L.qe or 0), num(L.n), l, num(L.m), num(L.sx), x},
    '|'), 'PX', math.max(until_ms - now, 1))
end

-- next_fence issues max(last + 1, now * 1000) and keeps the key FENCE_GUARD_MS.
--
-- Why fences still only grow once the key is gone. Let f be the highest fence
-- issued, by a grant at Redis clock time t: f <= t * 1000 + k, where k is the
-- number of grants that found last + 1 above the time floor, which needs more
-- than 1000 grants of one lock in a millisecond to pass 1 ms. The key outlives
-- that grant by at least FENCE_GUARD_MS of the Redis clock (expiry is a deadline
-- on that clock), so while it exists every grant gets last + 1 > f; once it is
-- gone, the clock reads at least t + FENCE_GUARD_MS, and a grant at clock time
-- t2 gets t2 * 1000. If the clock then never steps back by more than
-- FENCE_GUARD_MS, t2 > t and t2 * 1000 > f. So fences only grow as long as the
-- Redis clock never steps back by more than the guard (an NTP step, a failover
-- to a replica whose clock is behind).
local function next_fence(L, now)
  local f = math.max(L.f + 1, now * 1000)
  L.f, L.dirty = f, true
  return f
end

-- get_shared is the live shared hold under lh, or nil.
local function get_shared(L, lh, now)
  if L.n == 0 then
    return nil
  end
  derive()
  local h = unpack_hold(redis.call('HGET', shrec, lh))
  if h and h.d >= now then
    return h
  end
  return nil
end

-- find is the live hold under lease hash lh: its kind ('x' or 's') and record.
local function find(L, lh, now)
  if lh == '' then
    return nil, nil
  end
  if L.x and L.x.lh == lh then
    return 'x', L.x
  end
  local h = get_shared(L, lh, now)
  if h then
    return 's', h
  end
  return nil, nil
end

-- fit_shared makes the shared holds' keys expire with their last hold (a
-- shorter renewal, or the end of the longest hold, shortens them too), and
-- notes the latest deadline.
local function fit_shared(L, now)
  derive()
  local last = redis.call('ZRANGE', shset, -1, -1, 'WITHSCORES')
  if #last > 0 then
    L.sx = tonumber(last[2])
    redis.call('PEXPIRE', shset, math.max(L.sx - now, 1))
    redis.call('PEXPIRE', shrec, math.max(L.sx - now, 1))
  end
end

-- put writes a hold back (its record changed).
local function put(L, h, now)
  if h.shared then
    derive()
    redis.call('HSET', shrec, h.lh, pack_hold(h))
    redis.call('ZADD', shset, str(h.d), h.lh)
    fit_shared(L, now)
    if h.d < L.m then
      L.m = h.d
    end
  else
    L.x = h
  end
  L.dirty = true
end

-- keep_record makes an Idempotency-Key's record outlive what it made, which
-- now lives ms more, by the grace.
local function keep_record(ik, ms)
  if ik == '' then
    return
  end
  derive()
  if redis.call('PTTL', iprefix .. ik) < ms + GRACE_MS then
    redis.call('PEXPIRE', iprefix .. ik, ms + GRACE_MS)
  end
end

-- set_deadline makes a hold live ttl ms from now (a session's hold: until the
-- session's deadline, no more, no less) and keeps its record past it.
local function set_deadline(L, h, ttl, now)
  local sd = tonumber(h.sd)
  if sd then
    ttl = math.max(sd - now, 1)
  end
  h.d = now + ttl
  put(L, h, now)
  keep_record(h.ik, ttl)
end

-- end_record: what the record ik made has ended; it is kept for the grace.
local function end_record(ik)
  if ik and ik ~= '' then
    derive()
    redis.call('PEXPIRE', iprefix .. ik, GRACE_MS)
  end
end

-- end_hold removes a hold entirely (whatever its count).
local function end_hold(L, kind, h, now)
  end_record(h.ik)
  L.dirty = true
  if kind == 'x' then
    L.x = nil
    return
  end
  derive()
  redis.call('HDEL', shrec, h.lh)
  redis.call('ZREM', shset, h.lh)
  L.n = L.n - 1
  if L.n > 0 then
    fit_shared(L, now)
  else
    L.n, L.m, L.sx = 0, 0, 0
  end
end

-- prune drops the holds whose deadline has passed (expiry runs no script).
local function prune(L, now)
  if L.x and L.x.d < now then
    L.x, L.dirty = nil, true
  end
  if L.n > 0 and L.m < now then
    derive()
    local gone = redis.call('ZRANGEBYSCORE', shset, '-inf', '(' .. str(now))
    if #gone > 0 then
      redis.call('HDEL', shrec, unpack(gone))
      redis.call('ZREMRANGEBYSCORE', shset, '-inf', '(' .. str(now))
    end
    L.n, L.dirty = redis.call('ZCARD', shset), true
    if L.n == 0 then
      L.m, L.sx = 0, 0
    else
      L.m = tonumber(redis.call('ZRANGE', shset, 0, 0, 'WITHSCORES')[2])
    end
  end
end

-- announce publishes msg while some gateway waits for news of the lock.
local function announce(L, now, msg)
  if L.w >= now then
    derive()
    redis.call(PUBLISH, chan, msg)
  end
end

-- interest notes that a gateway waits for news of the lock until now + ms.
local function interest(L, now, ms)
  local w = now + ms + 1000 -- a margin for the gateway's estimate of this clock
  if w > L.w then
    L.w, L.dirty = w, true
  end
end

-- head_ticket drops dead tickets (their key expired) from the head of the
-- queue and returns the hash of the first live one, or nil.
local function head_ticket(L)
  if not L.q then
    return nil
  end
  derive()
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)
    if #head == 0 then
      L.q, L.qe, L.dirty = false, 0, true
      return nil
    end
    if redis.call('EXISTS', tprefix .. head[1]) == 1 then
      return head[1]
    end
    redis.call('ZREM', queue, head[1])
  end
end

-- COUNT_SCAN is how many queue entries waiters() and position() look at: dead
-- tickets among them are dropped and not counted; beyond them every entry counts.
local COUNT_SCAN = 100

local function waiters(L)
  if not L.q then
    return 0
  end
  derive()
  local n = 0
  for _, th in ipairs(redis.call('ZRANGE', queue, 0, COUNT_SCAN - 1)) do
    if redis.call('EXISTS', tprefix .. th) == 1 then
      n = n + 1
    else
      redis.call('ZREM', queue, th)
    end
  end
  return n + math.max(redis.call('ZCARD', queue) - COUNT_SCAN, 0)
end

-- position is a ticket's place among the live tickets (exact up to COUNT_SCAN).
local function position(th)
  derive()
  local ahead = 0
  for _, h in ipairs(redis.call('ZRANGE', queue, 0, COUNT_SCAN - 1)) do
    if h == th then
      return ahead + 1
    end
    if redis.call('EXISTS', tprefix .. h) == 1 then
      ahead = ahead + 1
    else
      redis.call('ZREM', queue, h)
    end
  end
  return (redis.call('ZRANK', queue, th) or 0) + 1
end

-- fits reports whether a new hold of the mode fits the lock's holds now: an
-- exclusive one when there are none, a shared one when there is no exclusive
-- hold and fewer than its limit ('0': none) shared ones under the same limit;
-- mismatch: a shared request under another limit than the shared holds'.
local function fits(L, shared, limit)
  if L.x then
    return false, false
  end
  if not shared then
    return L.n == 0, false
  end
  if L.n == 0 then
    return true, false
  end
  if L.l ~= limit then
    return false, true
  end
  local lim = tonumber(limit)
  return lim == 0 or L.n < lim, false
end

-- grant makes a new hold for window ms (the lease, or a claim window for a
-- handoff that waits for its claim) and returns it.
local function grant(L, now, window, lh, ttl, by, tk, pc, mk, ik, sd, ss, sm, lim, owner)
  local g = {lh = lh, d = now + window, c = 1, f = str(next_fence(L, now)), ttl = ttl, at = str(now), by = by,
    told = '0', tk = tk, pc = pc, mk = mk, ik = ik, sd = sd, ss = ss, sm = sm, lim = lim, owner = owner,
    shared = lim ~= ''}
  if g.shared then
    if L.n == 0 then
      L.l, L.m = g.lim, now + window
    end
    L.n = L.n + 1
  end
  put(L, g, now)
  keep_record(g.ik, window)
  return g
end

-- ticket_fields reads a ticket's hash into a table, with its polls in flight
-- (their deadline not passed) as a comma-separated list.
local function ticket_fields(tkey, now)
  derive()
  local v, t, polls = redis.call('HGETALL', tkey), {}, {}
  for i = 1, #v, 2 do
    if string.sub(v[i], 1, 2) == 'q:' then
      if tonumber(v[i + 1]) >= now then
        polls[#polls + 1] = string.sub(v[i], 3)
      end
    else
      t[v[i]] = v[i + 1]
    end
  end
  t.polls = table.concat(polls, ',')
  return t
end

-- handoff grants the lock to the head live ticket while it fits (an exclusive
-- one when no holds are left; a run of shared ones while there is room), waking
-- exactly each granted ticket's waiters. A ticket with polls in flight gets its
-- full ttl at once, handed to those polls (their waiters answer straight from
-- the message); otherwise the grant is kept for the ticket ttl, and the first
-- poll claims it. When it grants nothing and ended is true (a hold just ended),
-- it announces 'r' when nobody is queued, else 'c'. Returns how many it granted.
local function handoff(L, now, ended)
  local granted = 0
  while true do
    local th = head_ticket(L)
    if not th then
      break
    end
    local tkey = tprefix .. th
    local t = ticket_fields(tkey, now)
    local shared, limit, ttl = t.sh == '1', t.lim or '0', tonumber(t.ttl)
    local sd = tonumber(t.sd or '')
    if sd then -- a session's ticket: its hold shares the session's deadline
      ttl = sd - now
    end
    if ttl <= 0 then -- its session has ended: the ticket goes with it
      redis.call('ZREM', queue, th)
      redis.call('DEL', tkey)
      end_record(t.ik)
    elseif fits(L, shared, limit) then
      local window, tk, claimed = math.min(tonumber(t.tt), ttl), th, '0'
      if t.polls ~= '' then
        window, tk, claimed = ttl, '', '1,' .. t.polls
      end
      local lim = ''
      if shared then
        lim = limit
      end
      local g = grant(L, now, window, t.lh, ttl, t.by or '', tk, t.polls, t.mk or '', t.ik or '', t.sd or '',
        t.ss or '', t.sm or '', lim, t.owner or '')
      redis.call('ZREM', queue, th)
      redis.call('DEL', tkey)
      local sh = '0'
      if shared then
        sh = '1'
      end
      redis.call(PUBLISH, chan, 'g:' .. th .. ':' .. g.f .. ':' .. g.at .. ':' .. str(window) .. ':' .. claimed ..
        ':' .. sh .. ':' .. limit .. ':' .. g.owner)
      granted = granted + 1
    else
      break
    end
  end
  if granted == 0 and ended then
    if L.q then
      announce(L, now, 'c')
    else
      announce(L, now, 'r')
    end
  elseif granted > 0 and not L.q and not L.x then
    announce(L, now, 'r') -- a run of shared grants emptied the queue: non-fair shared waiters may fit too
  end
  return granted
end

-- settle drops what has expired and hands a lock whose holds ended by expiry
-- to the head live tickets that fit.
local function settle(L, now)
  prune(L, now)
  if L.q and not L.x then
    handoff(L, now, false)
  end
end

-- hold_reply: {code, fence, count, pttl, at, owner, ttl, now, shared 0/1, limit}.
local function hold_reply(code, now, h)
  local sh, lim = 0, '0'
  if h.shared then
    sh, lim = 1, h.lim
  end
  return {code, h.f, h.c, math.max(h.d - now, 0), h.at, h.owner, h.ttl, now, sh, lim}
end

-- soonest is the hold that ends first, when the lock has holds.
local function soonest(L)
  if L.x then
    return L.x
  end
  if L.n > 0 then
    derive()
    local first = redis.call('ZRANGE', shset, 0, 0)
    if #first > 0 then
      return get_shared(L, first[1], 0)
    end
  end
  return nil
end

-- wake_ms is how long until something may change for a waiter with nobody
-- announcing it (expiry runs no script): the soonest hold's end, or the head
-- ticket's, whichever comes first. A waiting gateway pokes the lock then.
local function wake_ms(L, now)
  local h = soonest(L)
  local ms = -1
  if h then
    ms = math.max(h.d - now, 0)
  end
  if L.q then
    derive()
    local head = redis.call('ZRANGE', queue, 0, 0)
    if #head > 0 then
      local t = redis.call('PTTL', tprefix .. head[1])
      if t >= 0 and (ms < 0 or t < ms) then
        ms = t
      end
    end
  end
  return math.max(ms, 0)
end

-- busy_reply: {'busy', pttl, owner, waiters, wake}: the soonest-ending hold's
-- time and owner (when a slot or the lock frees), the queue, and wake_ms.
local function busy_reply(L, now)
  local h, pttl, owner = soonest(L), 0, ''
  if h then
    pttl, owner = math.max(h.d - now, 0), h.owner
  end
  return {'busy', pttl, owner, waiters(L), wake_ms(L, now)}
end

-- keep_ticket keeps a ticket alive for its ticket ttl past the end of the last
-- of its polls in flight, and the queue and the lock at least as long. pid
-- names the poll: poll_ms > 0 starts (or extends) it until now + poll_ms, 0
-- ends it.
local function keep_ticket(L, tkey, now, poll_ms, pid)
  derive()
  if pid ~= '' then
    if poll_ms > 0 then
      redis.call('HSET', tkey, 'q:' .. pid, str(now + poll_ms))
    else
      redis.call('HDEL', tkey, 'q:' .. pid)
    end
  end
  local v, p, tt, ik = redis.call('HGETALL', tkey), now, 0, ''
  for i = 1, #v, 2 do
    if string.sub(v[i], 1, 2) == 'q:' then
      local d = tonumber(v[i + 1])
      if d < now then
        redis.call('HDEL', tkey, v[i])
      elseif d > p then
        p = d
      end
    elseif v[i] == 'tt' then
      tt = tonumber(v[i + 1])
    elseif v[i] == 'ik' then
      ik = v[i + 1]
    end
  end
  local life = tt + p - now
  redis.call('PEXPIRE', tkey, life)
  if redis.call('PTTL', queue) < life then
    redis.call('PEXPIRE', queue, life)
  end
  if now + life > L.qe then
    L.q, L.qe, L.dirty = true, now + life, true
  end
  if ik ~= '' and redis.call('PTTL', iprefix .. ik) < life + GRACE_MS then
    redis.call('PEXPIRE', iprefix .. ik, life + GRACE_MS)
  end
end

-- drop_ticket removes a queued ticket and ends its record.
local function drop_ticket(L, th, tkey)
  derive()
  redis.call('ZREM', queue, th)
  end_record(redis.call('HGET', tkey, 'ik'))
  if redis.call('ZCARD', queue) == 0 then -- nothing queued keeps the lock now
    L.q, L.qe, L.dirty = false, 0, true
  end
  return redis.call('DEL', tkey)
end

-- queued_reply: {'queued', position, waiters, wake, ticket ttl}.
local function queued_reply(L, th, tkey, now)
  return {'queued', position(th), waiters(L), wake_ms(L, now), tonumber(redis.call('HGET', tkey, 'tt'))}
end

-- has_item reports whether the comma-separated list l has the item w.
local function has_item(l, w)
  return string.find(',' .. l .. ',', ',' .. w .. ',', 1, true) ~= nil
end

-- without_item is the comma-separated list l without the item w.
local function without_item(l, w)
  local out = {}
  for x in string.gmatch(l, '[^,]+') do
    if x ~= w then
      out[#out + 1] = x
    end
  end
  return table.concat(out, ',')
end

-- MAX_HANDED bounds a hold's list of answers handed out: past it, the hold
-- counts as told (a client asking for it again and again has it).
local MAX_HANDED = 4

-- hand_out marks a hold handed to an answer other than its maker's: proven
-- (a re-entry, a renewal, a session's look: its owner has it, and no undo ends
-- it now), or handed to the answer id (a poll's id, a replay's maker id) whose
-- client may yet not get it: that answer's undo takes only itself out, and the
-- hold ends (or, a ticket's grant, waits for its claim again) only once its
-- maker's answer and every answer handed out failed. A handoff waiting for its
-- claim is claimed, at its full ttl.
local function hand_out(L, h, now, proven, id)
  if proven then
    h.told, h.pc = '1', ''
  elseif id ~= '' and h.told ~= '1' and not has_item(h.pc, id) then
    if h.pc == '' then
      h.pc = id
    elseif select(2, string.gsub(h.pc, ',', '')) + 1 >= MAX_HANDED then
      h.told, h.pc = '1', '' -- handed out again and again: somebody has it
    else
      h.pc = h.pc .. ',' .. id
    end
  end
  if h.tk ~= '' then
    h.tk = ''
    set_deadline(L, h, h.ttl, now)
  else
    put(L, h, now)
  end
end

-- End of lib.lua.
