-- lib.lua: helpers shared by every Baton script. The loader prepends this file to
-- each script, so the helpers run inside the same atomic call.
--
-- KEYS, the same first three for every script (prefix P, lock name N):
--   KEYS[1]  P:{N}        the exclusive hold, while there is one: a hash of lease
--                         (SHA-256 of the lease id) and the hold's fields (below)
--   KEYS[2]  P:{N}:fence  the last fence issued
--   KEYS[3]  P:{N}:q      queue: ticket hash -> arrival sequence
-- Derived from KEYS[1], so they share its hash slot:
--   P:{N}:s               shared holds: lease hash -> deadline (Redis ms)
--   P:{N}:s:<lease hash>  one shared hold's fields; PEXPIRE = its deadline
--   P:{N}:sl              the shared holds' limit ('0': none), while there are any
--   P:{N}:t:<ticket hash> ticket hash: lh (lease hash it will be granted under),
--                         ttl, owner, tt (ticket ttl ms), p (poll deadline, ms),
--                         by, sh ('1' shared), lim, ik (its idempotency record),
--                         sd, ss, sm (its session's, as for holds), q:<poll id>
--                         (each poll's deadline), p and pp (the latest of them);
--                         its existence is its liveness
--   P:{N}:x:<lease hash>  tombstone of an abandoned request (abandon.lua) or of
--                         a granted one (acquire.lua, from its grant), kept until
--                         the deadline of the request's call, so that a copy of
--                         its acquire run late grants nothing
--   P:{N}:x:p:<poll id>   tombstone of a ticket poll undone (unpoll.lua), likewise
--   P:{N}:i:<key hash>    an Idempotency-Key's record (hash of the principal and
--                         the key): b (body hash), k ('h' a hold or 't' a ticket),
--                         h (its hash); lives while what it made lives, and
--                         IDEMPOTENCY_GRACE_MS after
--   P:{N}:ev              pub/sub channel: 'r' (a hold ended and nobody is
--                         queued), 'c' (the holds changed, nobody granted, the
--                         queue waits) or
--                         'g:<ticket hash>:<fence>:<at>:<window ms>:<claimed>:<shared 1|0>:<limit>:<owner>'
--                         (granted to that ticket; claimed '1,<poll id>,...' when
--                         polls were in flight, at the full ttl, for those polls;
--                         '0' unclaimed)
--
-- A hold's fields, the same in the exclusive hash and a shared hold's hash: count,
-- fence, owner, ttl (ms of the last grant or renewal), at (grant time, ms), tk
-- (ticket hash while a handoff is unclaimed), by (the principal that made it),
-- lim (shared: the limit it was granted under), ik (the key hash of its
-- idempotency record, '' for none), pc (the polls that may have handed a
-- ticket's grant to its owner, space-separated: see unpoll.lua), and for a hold of a session: sd (the
-- session's deadline on this lock's Redis clock: no extension goes past it),
-- ss (the session's hash) and sm (its member there). A hold lives while Redis time <=
-- its deadline (PEXPIRE; for shared holds also the score in P:{N}:s): every
-- script first drops shared holds whose deadline has passed (expiry runs no
-- script), then decides.
--
-- Numbers above 2^31 (fences, times) travel as strings: Lua numbers are doubles and
-- tostring would print them in exponent form.
--
-- PUBLISH, FENCE_GUARD_MS and IDEMPOTENCY_GRACE_MS are not defined here: the
-- loader (lua.Compose) puts them on the lines before this file, from
-- store.Options (BATON_FENCE_GUARD, BATON_IDEMPOTENCY_GRACE) and the kind of
-- Redis: PUBLISH is 'SPUBLISH' on a Redis Cluster, where the lock's channel
-- shares its slot ({name}) and a sharded message stays on that shard.

local lock, fencekey, queue = KEYS[1], KEYS[2], KEYS[3]
local channel = lock .. ':ev'
local tprefix = lock .. ':t:'
local shkey, slkey, sprefix = lock .. ':s', lock .. ':sl', lock .. ':s:'

local function str(n)
  return string.format('%.0f', n)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- keep_at_least makes key live at least ms from now.
local function keep_at_least(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- keep_fence makes the fence key live at least ms from now.
local function keep_fence(ms)
  keep_at_least(fencekey, ms)
end

-- next_fence issues max(last + 1, now * 1000) for a grant whose lease (or claim
-- window) is window ms, and keeps the fence key for the longer of the lease and
-- FENCE_GUARD_MS. Every script that extends a hold or a ticket extends the key to
-- match (keep_fence), so it lives while the lock has holds or a queue, and for
-- the guard after the last grant; then nothing of the name is left in Redis.
--
-- Why fences still only grow once the key is gone. Let f be the highest fence
-- issued, by a grant at Redis clock time t: f <= t * 1000 + k, where k is the number
-- of grants that found last + 1 above the time floor, which needs more than 1000
-- grants of one lock in a millisecond to pass 1 ms. The key outlives that grant by
-- at least FENCE_GUARD_MS of the Redis clock (expiry is a deadline on that clock), so
-- while it exists every grant gets last + 1 > f; once it is gone, the clock reads
-- at least t + FENCE_GUARD_MS, and a grant at clock time t2 gets t2 * 1000. If the
-- clock then never steps back by more than FENCE_GUARD_MS, t2 > t and t2 * 1000 >
-- f. A step back while the key exists only postpones its expiry. So fences only
-- grow as long as the Redis clock never steps back by more than the guard: an NTP
-- step, or a failover to a replica whose clock is behind (a failover that loses
-- the key's last update is the README's "replication is asynchronous" caveat).
local function next_fence(now, window)
  local last = tonumber(redis.call('GET', fencekey) or '0') or 0
  local f = math.max(last + 1, now * 1000)
  redis.call('SET', fencekey, str(f), 'KEEPTTL')
  keep_fence(math.max(FENCE_GUARD_MS, tonumber(window)))
  return f
end

-- COUNT_SCAN is how many queue entries waiters() and position() look at: dead
-- tickets among them are dropped and not counted; beyond them every entry counts.
local COUNT_SCAN = 100

-- waiters is the number of live tickets in the queue (exact up to COUNT_SCAN
-- entries), dropping the dead ones it meets.
local function waiters()
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

-- prune_shared drops shared holds whose deadline has passed and returns how many.
-- (Their hashes expire at the same deadline by themselves.)
local function prune_shared(now)
  local n = redis.call('ZREMRANGEBYSCORE', shkey, '-inf', '(' .. str(now))
  if n > 0 and redis.call('EXISTS', shkey) == 0 then
    redis.call('DEL', slkey)
  end
  return n
end

local function shared_count()
  return redis.call('ZCARD', shkey)
end

-- find_hold returns the kind ('x' or 's') and key of the live hold under lease
-- hash lh, or nil. Shared holds must have been pruned.
local function find_hold(lh)
  if redis.call('HGET', lock, 'lease') == lh then
    return 'x', lock
  end
  if redis.call('ZSCORE', shkey, lh) then
    return 's', sprefix .. lh
  end
  return nil, nil
end

-- fit_shared_keys makes the shared-hold set and its limit expire with the last
-- shared hold's deadline (not the longest ever set, which a shorter renewal
-- would leave behind).
local function fit_shared_keys(now)
  local last = redis.call('ZRANGE', shkey, -1, -1, 'WITHSCORES')
  if #last > 0 then
    local ms = math.max(tonumber(last[2]) - now, 1)
    redis.call('PEXPIRE', shkey, ms)
    redis.call('PEXPIRE', slkey, ms)
  end
end

-- record_key is the key of an idempotency record, from its key hash.
local function record_key(ik)
  return lock .. ':i:' .. ik
end

-- keep_record makes the idempotency record ik (if any) outlive what it made,
-- which now lives ms more, by the grace.
local function keep_record(ik, ms)
  if ik and ik ~= '' then
    keep_at_least(record_key(ik), ms + IDEMPOTENCY_GRACE_MS)
  end
end

-- end_record: what the record ik made has ended; it is kept for the grace.
local function end_record(ik)
  if ik and ik ~= '' then
    redis.call('PEXPIRE', record_key(ik), IDEMPOTENCY_GRACE_MS)
  end
end

-- has_word reports whether the space-separated list l has the word w.
local function has_word(l, w)
  for x in string.gmatch(l or '', '%S+') do
    if x == w then
      return true
    end
  end
  return false
end

-- without_word is the space-separated list l without the word w.
local function without_word(l, w)
  local out = {}
  for x in string.gmatch(l or '', '%S+') do
    if x ~= w then
      out[#out + 1] = x
    end
  end
  return table.concat(out, ' ')
end

-- set_deadline makes a hold live ttl ms from now.
local function set_deadline(kind, key, lh, ttl, now)
  local sd = tonumber(redis.call('HGET', key, 'sd') or '')
  if sd then -- a session's hold lasts as long as the session: no more, no less
    ttl = math.max(sd - now, 1)
  end
  redis.call('PEXPIRE', key, ttl)
  keep_record(redis.call('HGET', key, 'ik'), ttl)
  if kind == 's' then
    redis.call('ZADD', shkey, str(now + ttl), lh)
    fit_shared_keys(now)
  end
  keep_fence(ttl)
end

-- tombstone makes the acquire of lease hash lh, should a copy of it still
-- reach Redis, grant nothing until deadline (Redis ms, inclusive): past it that
-- copy changes nothing by itself (expired). A longer tombstone stays as it is.
-- v is '1' (any acquire under lh), or 'n:<nonce>': only that request's copies
-- (an idempotent request's lease hash is its key's, which a fresh request with
-- the same key shares).
local function tombstone(lh, deadline, now, v)
  local k, ms = lock .. ':x:' .. lh, deadline - now + 1
  if ms > 0 and redis.call('PTTL', k) < ms then
    redis.call('SET', k, v or '1', 'PX', ms)
  end
end

-- entombed reports whether a tombstone stops the acquire of lease hash lh
-- made by the request nonce.
local function entombed(lh, nonce)
  local v = redis.call('GET', lock .. ':x:' .. lh)
  return v ~= false and v ~= nil and (string.sub(v, 1, 2) ~= 'n:' or v == 'n:' .. nonce)
end

-- end_hold removes a hold entirely (whatever its count). A copy of the acquire
-- that made it, still on its way, finds the tombstone that acquire left
-- (acquire.lua), which lasts until that call's deadline.
local function end_hold(kind, key, lh, now)
  end_record(redis.call('HGET', key, 'ik'))
  redis.call('DEL', key)
  if kind == 's' then
    redis.call('ZREM', shkey, lh)
    if redis.call('EXISTS', shkey) == 0 then
      redis.call('DEL', slkey)
    else
      fit_shared_keys(now)
    end
  end
end

-- head_ticket drops dead tickets (their key expired) from the head of the queue and
-- returns the hash of the first live one, or nil.
local function head_ticket()
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)
    if #head == 0 then
      return nil
    end
    if redis.call('EXISTS', tprefix .. head[1]) == 1 then
      return head[1]
    end
    redis.call('ZREM', queue, head[1])
  end
end

-- fits reports whether a new hold of the mode fits the lock's holds now: an
-- exclusive one when there are none, a shared one when there is no exclusive
-- hold and fewer than its limit ('0': none) shared ones under the same limit.
-- A shared request under another limit than the shared holds' does not fit, and
-- mismatch is true.
local function fits(shared, limit)
  if redis.call('EXISTS', lock) == 1 then
    return false, false
  end
  local n = shared_count()
  if not shared then
    return n == 0, false
  end
  if n == 0 then
    return true, false
  end
  if redis.call('GET', slkey) ~= limit then
    return false, true
  end
  local lim = tonumber(limit)
  return lim == 0 or n < lim, false
end

-- grant creates a hold under lease hash lh for window ms (the lease, or a claim
-- window for an unclaimed handoff, with tk the ticket hash).
local function grant(shared, limit, lh, ttl, owner, by, now, fence, window, tk, ik)
  local key, kind = lock, 'x'
  if shared then
    key, kind = sprefix .. lh, 's'
    redis.call('SET', slkey, limit, 'KEEPTTL')
  end
  redis.call('HSET', key, 'count', 1, 'fence', str(fence), 'owner', owner, 'ttl', ttl, 'at', str(now),
    'tk', tk, 'by', by, 'lim', limit, 'ik', ik or '')
  if not shared then
    redis.call('HSET', key, 'lease', lh)
  end
  set_deadline(kind, key, lh, window, now)
end

-- fit_fence cuts the fence key back to what must keep it: FENCE_GUARD_MS after
-- the last grant, and the lock's holds and queue while they last; called where
-- a hold or a ticket ends or is cut short, so that a lease released early, or a
-- ticket gone early, does not keep it longer. A fence is at least its grant's
-- time in microseconds, so fence / 1000 is no earlier than the last grant, and
-- counting the guard from it errs on the long side.
local function fit_fence(now)
  local last = tonumber(redis.call('GET', fencekey) or '0') or 0
  local need = math.max(math.floor(last / 1000) + FENCE_GUARD_MS - now, redis.call('PTTL', lock),
    redis.call('PTTL', queue))
  local sh = redis.call('ZRANGE', shkey, -1, -1, 'WITHSCORES')
  if #sh > 0 then
    need = math.max(need, tonumber(sh[2]) - now)
  end
  if need <= 0 then
    redis.call('DEL', fencekey)
  elseif redis.call('PTTL', fencekey) > need then
    redis.call('PEXPIRE', fencekey, need)
  end
end

-- live_polls names a ticket's polls in flight (their q: deadline not passed),
-- space-separated.
local function live_polls(tkey, now)
  local f, out = redis.call('HGETALL', tkey), {}
  for i = 1, #f, 2 do
    if string.sub(f[i], 1, 2) == 'q:' and tonumber(f[i + 1]) >= now then
      out[#out + 1] = string.sub(f[i], 3)
    end
  end
  return table.concat(out, ' ')
end

-- handoff grants the lock to the head live ticket while it fits (an exclusive one
-- when no holds are left; a run of shared ones while there is a free slot), waking
-- exactly each granted ticket's waiter. A ticket whose owner is polling gets its
-- full ttl at once (the waiter answers with the lease straight from the message);
-- otherwise the grant is kept for the ticket ttl, and the first poll claims it.
-- When it grants nothing and announce is true (a hold just ended), it announces
-- 'r' if nobody is queued (a non-fair waiter may try), else 'c' (the holds
-- changed: for watchers). Returns how many it granted.
local function handoff(now, announce)
  local granted = 0
  while true do
    local th = head_ticket()
    if not th then
      break
    end
    local tkey = tprefix .. th
    local t = redis.call('HMGET', tkey, 'lh', 'ttl', 'owner', 'tt', 'p', 'by', 'sh', 'lim', 'ik', 'sd', 'pp', 'ss', 'sm')
    local shared, limit, ttl = t[7] == '1', t[8] or '0', tonumber(t[2])
    local sd = tonumber(t[10] or '')
    if sd then -- a session's ticket: its hold shares the session's deadline
      ttl = sd - now
    end
    if ttl <= 0 then -- its session has ended: the ticket goes with it
      redis.call('ZREM', queue, th)
      redis.call('DEL', tkey)
      end_record(t[9])
    elseif fits(shared, limit) then
      local window, tk, claimed, pc = math.min(tonumber(t[4]), ttl), th, '0', ''
      if (tonumber(t[5]) or 0) >= now then
        -- Every poll in flight may answer from the message, not only the
        -- latest (pp): each is named in pc, and in the message, whose waiters
        -- answer from it only when named there (store/ticketwait.go).
        pc = live_polls(tkey, now)
        window, tk, claimed = ttl, '', '1'
        if pc ~= '' then
          claimed = '1,' .. string.gsub(pc, ' ', ',')
        end
      end
      -- The fence key lives for the grant's window: the full lease when claimed
      -- at once; else the claim window, and a claim (set_deadline) keeps it
      -- for the lease then. A grant never claimed passes on, and its fence key
      -- does not outlive the guard by the lease it never had.
      local fence = next_fence(now, window)
      grant(shared, limit, t[1], ttl, t[3], t[6] or '', now, fence, window, tk, t[9])
      -- pc: the poll in flight this grant was made for, at its full ttl; only that
      -- poll's end may turn the grant back into an unclaimed one (unpoll.lua).
      local hkey = (shared and (sprefix .. t[1])) or lock
      redis.call('HSET', hkey, 'pc', pc)
      if sd then
        redis.call('HSET', hkey, 'sd', str(sd), 'ss', t[12] or '', 'sm', t[13] or '')
      end
      redis.call('ZREM', queue, th)
      redis.call('DEL', tkey)
      local sh = '0'
      if shared then
        sh = '1'
      end
      redis.call(PUBLISH, channel, 'g:' .. th .. ':' .. str(fence) .. ':' .. str(now) .. ':' .. str(window) ..
        ':' .. claimed .. ':' .. sh .. ':' .. limit .. ':' .. t[3])
      granted = granted + 1
    else
      break
    end
  end
  if granted == 0 and announce then
    if redis.call('EXISTS', queue) == 0 then
      redis.call(PUBLISH, channel, 'r')
    else
      redis.call(PUBLISH, channel, 'c')
    end
  elseif granted > 0 and redis.call('EXISTS', queue) == 0 and redis.call('EXISTS', lock) == 0 then
    -- A run of shared grants emptied the queue: non-fair shared waiters may fit too.
    redis.call(PUBLISH, channel, 'r')
  end
  -- The holds that ended (or the grants just made, for their windows) may
  -- need the fence key for less than it was kept for.
  fit_fence(now)
  return granted
end

-- settle drops expired shared holds and dead tickets from the head of the queue,
-- and hands a lock whose holds ended by expiry (which runs no script) to the head
-- live tickets that fit.
local function settle(now)
  prune_shared(now)
  if head_ticket() and redis.call('EXISTS', lock) == 0 then
    handoff(now, false)
  end
end

-- hold_reply describes a hold: {code, fence, count, pttl, at, owner, ttl, now,
-- shared 0/1, limit}.
local function hold_reply(code, now, kind, key)
  local h = redis.call('HMGET', key, 'fence', 'count', 'at', 'owner', 'ttl', 'lim')
  local sh = 0
  if kind == 's' then
    sh = 1
  end
  return {code, h[1], tonumber(h[2]), redis.call('PTTL', key), h[3], h[4], tonumber(h[5]), str(now), sh, h[6] or '0'}
end

-- soonest is the hold that ends first ({key, pttl}) when the lock has holds:
-- the exclusive one, or the shared one with the earliest deadline.
local function soonest(now)
  if redis.call('EXISTS', lock) == 1 then
    return lock, redis.call('PTTL', lock)
  end
  local first = redis.call('ZRANGE', shkey, 0, 0, 'WITHSCORES')
  if #first == 0 then
    return nil, 0
  end
  return sprefix .. first[1], math.max(tonumber(first[2]) - now, 0)
end

-- wake_ms is how long until something may change for a waiter with nobody
-- announcing it (expiry runs no script): the soonest hold's end, or the head
-- ticket's, whichever comes first. A waiting gateway pokes the lock then.
local function wake_ms(now)
  local key, pttl = soonest(now)
  if not key then
    pttl = -1 -- no hold (a hold about to end has 0)
  end
  local head = redis.call('ZRANGE', queue, 0, 0)
  if #head > 0 then
    local t = redis.call('PTTL', tprefix .. head[1])
    if t >= 0 and (pttl < 0 or t < pttl) then
      pttl = t
    end
  end
  return math.max(pttl, 0)
end

-- busy_reply: {'busy', pttl, owner, waiters, wake}: the soonest-ending hold's
-- time and owner (when a slot or the lock frees), the queue, and wake_ms.
local function busy_reply(now)
  local key, pttl = soonest(now)
  local owner = ''
  if key then
    owner = redis.call('HGET', key, 'owner') or ''
  end
  return {'busy', pttl, owner, waiters(), wake_ms(now)}
end

-- keep_ticket keeps a ticket alive for its ticket ttl past the end of the last
-- of its polls in flight, and the queue at least as long. pid names the poll:
-- poll_ms > 0 starts it (or extends it) until now + poll_ms, 0 ends it. Each
-- poll's deadline is a field q:<pid>; p is the latest, pp that poll's pid.
local function keep_ticket(tkey, now, poll_ms, pid)
  if pid and pid ~= '' then
    if poll_ms > 0 then
      redis.call('HSET', tkey, 'q:' .. pid, str(now + poll_ms))
    else
      redis.call('HDEL', tkey, 'q:' .. pid)
    end
  end
  local f = redis.call('HGETALL', tkey)
  local p, pp = 0, ''
  for i = 1, #f, 2 do
    if string.sub(f[i], 1, 2) == 'q:' then
      local d = tonumber(f[i + 1])
      if d < now then
        redis.call('HDEL', tkey, f[i])
      elseif d > p then
        p, pp = d, string.sub(f[i], 3)
      end
    end
  end
  if pid == nil and poll_ms > 0 then -- a poll without a name (an acquire's own wait)
    p = math.max(p, now + poll_ms)
  end
  redis.call('HSET', tkey, 'p', str(p), 'pp', pp)
  local life = tonumber(redis.call('HGET', tkey, 'tt')) + math.max(p - now, 0)
  redis.call('PEXPIRE', tkey, life)
  keep_at_least(queue, life)
  keep_fence(life)
  keep_record(redis.call('HGET', tkey, 'ik'), life)
end

-- drop_ticket removes a ticket (queued, not granted) and ends its record.
local function drop_ticket(th, tkey)
  redis.call('ZREM', queue, th)
  end_record(redis.call('HGET', tkey, 'ik'))
  return redis.call('DEL', tkey)
end

-- position is a ticket's place among the live tickets (exact up to COUNT_SCAN),
-- dropping the dead ones ahead of it.
local function position(th)
  local ahead = 0
  for i, h in ipairs(redis.call('ZRANGE', queue, 0, COUNT_SCAN - 1)) do
    if h == th then
      return ahead + 1
    end
    if redis.call('EXISTS', tprefix .. h) == 1 then
      ahead = ahead + 1
    else
      redis.call('ZREM', queue, h)
    end
  end
  return redis.call('ZRANK', queue, th) + 1
end

-- queued_reply: {'queued', position, waiters, wake, ticket ttl}.
local function queued_reply(th, tkey, now)
  local pos = position(th)
  return {'queued', pos, waiters(), wake_ms(now), tonumber(redis.call('HGET', tkey, 'tt'))}
end

-- expired reports a call that reached Redis after its deadline (ARGV value
-- not_after, Redis ms, '' for none): it must change nothing, since its client was
-- told it failed and may have undone it (abandon.lua) already.
local function expired(now, not_after)
  return not_after ~= nil and not_after ~= '' and now > tonumber(not_after)
end

-- End of lib.lua.
