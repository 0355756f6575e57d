-- lib.lua: helpers shared by every Baton script. The loader prepends this file to
-- each script, so the helpers run inside the same atomic call.
--
-- KEYS, the same first three for every script (prefix P, lock name N):
--   KEYS[1]  P:{N}        lock hash: lease (SHA-256 of the lease id), count, fence,
--                         owner, ttl (ms of the last grant or renewal), at (grant
--                         time, ms), tk (ticket hash while a handoff is unclaimed)
--   KEYS[2]  P:{N}:fence  the last fence issued
--   KEYS[3]  P:{N}:q      queue: ticket hash -> arrival sequence
-- Derived from KEYS[1], so they share its hash slot:
--   P:{N}:t:<ticket hash> ticket hash: lh (lease hash it will be granted under),
--                         ttl, owner, tt (ticket ttl ms), p (poll deadline, ms);
--                         its existence is the ticket's liveness
--   P:{N}:x:<lease hash>  tombstone of an abandoned request (abandon.lua), kept
--                         briefly so that its acquire, run late, grants nothing
--   P:{N}:ev              pub/sub channel: 'r' (released, nobody queued) or
--                         'g:<ticket hash>:<fence>:<at>:<window ms>:<claimed 1|0>:<owner>'
--                         (granted to that ticket; claimed when its waiter was polling)
--
-- Numbers above 2^31 (fences, times) travel as strings: Lua numbers are doubles and
-- tostring would print them in exponent form.
--
-- FENCE_GUARD_MS is not defined here: the loader (lua.Compose) puts it on the line
-- before this file, from store.Options.FenceGuard (BATON_FENCE_GUARD).

local lock, fencekey, queue = KEYS[1], KEYS[2], KEYS[3]
local channel = lock .. ':ev'
local tprefix = lock .. ':t:'

local function str(n)
  return string.format('%.0f', n)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- keep_fence makes the fence key live at least ms from now.
local function keep_fence(ms)
  if redis.call('PTTL', fencekey) < ms then
    redis.call('PEXPIRE', fencekey, ms)
  end
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

local function waiters()
  return redis.call('ZCARD', queue)
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

local function grant(lh, ttl, owner, now, fence, window, tk)
  redis.call('HSET', lock, 'lease', lh, 'count', 1, 'fence', str(fence), 'owner', owner,
    'ttl', ttl, 'at', str(now), 'tk', tk)
  redis.call('PEXPIRE', lock, window)
end

-- handoff is called on a free lock. It grants the lock to the head live ticket and
-- wakes exactly that ticket's waiter, or announces 'r' when nobody is queued.
-- A ticket whose owner is polling gets its full ttl at once (the waiter answers
-- with the lease straight from the message); otherwise the grant is kept for the
-- ticket ttl, and the first poll claims it. Returns true when it granted.
local function handoff(now)
  local th = head_ticket()
  if not th then
    redis.call('PUBLISH', channel, 'r')
    return false
  end
  local tkey = tprefix .. th
  local t = redis.call('HMGET', tkey, 'lh', 'ttl', 'owner', 'tt', 'p')
  local window, tk, claimed = tonumber(t[4]), th, '0'
  if (tonumber(t[5]) or 0) >= now then
    window, tk, claimed = tonumber(t[2]), '', '1'
  end
  -- The key must outlive the full lease even when the grant waits for its claim.
  local fence = next_fence(now, t[2])
  grant(t[1], t[2], t[3], now, fence, window, tk)
  redis.call('ZREM', queue, th)
  redis.call('DEL', tkey)
  head_ticket() -- the next head may be dead too
  redis.call('PUBLISH', channel,
    'g:' .. th .. ':' .. str(fence) .. ':' .. str(now) .. ':' .. str(window) .. ':' .. claimed .. ':' .. t[3])
  return true
end

-- settle drops dead tickets from the head of the queue and hands a lock that
-- expired (expiry runs no script) to the head live ticket. Returns true when the
-- lock is held afterwards.
local function settle(now)
  local th = head_ticket()
  if redis.call('EXISTS', lock) == 1 then
    return true
  end
  if th == nil then
    return false
  end
  return handoff(now)
end

-- lease_reply describes the current holder: {code, fence, count, pttl, at, owner,
-- ttl, now}.
local function lease_reply(code, now)
  local h = redis.call('HMGET', lock, 'fence', 'count', 'at', 'owner', 'ttl')
  return {code, h[1], tonumber(h[2]), redis.call('PTTL', lock), h[3], h[4], tonumber(h[5]), str(now)}
end

-- keep_ticket keeps a ticket alive for its ticket ttl plus the poll now starting
-- (poll_ms, 0 when no poll is in flight), and the queue at least as long.
local function keep_ticket(tkey, now, poll_ms)
  local life = tonumber(redis.call('HGET', tkey, 'tt')) + poll_ms
  local p = 0
  if poll_ms > 0 then
    p = now + poll_ms
  end
  redis.call('HSET', tkey, 'p', str(p))
  redis.call('PEXPIRE', tkey, life)
  if redis.call('PTTL', queue) < life then
    redis.call('PEXPIRE', queue, life)
  end
  keep_fence(life)
end

-- queued_reply: {'queued', position, waiters, lock pttl, ticket ttl}.
local function queued_reply(th, tkey)
  local rank = redis.call('ZRANK', queue, th)
  return {'queued', rank + 1, waiters(), redis.call('PTTL', lock), tonumber(redis.call('HGET', tkey, 'tt'))}
end

-- End of lib.lua.
