-- acquire.lua: grant a hold (exclusive or shared), re-enter one, queue a fair
-- waiter, or report the lock busy; replay what an Idempotency-Key made.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 the caller's ticket key
--       P:{N}:t:<ticket hash> (any key of the lock's slot when there is no ticket)
-- ARGV: 1 lease hash (SHA-256 of the lease id: a new one, or the held one with
--         mode 'reenter')
--       2 ttl ms
--       3 owner label
--       4 mode: 'new' | 'fair' (queue when busy) | 'reenter'
--       5 ticket hash (mode 'fair', or an idempotent request)
--       6 lease hash the ticket will be granted under (likewise)
--       7 ticket ttl ms (mode 'fair')
--       8 poll ms: how long the caller will now wait for its ticket (mode 'fair')
--       9 by: the principal making the request
--       10 shared: '1' | '0'; with mode 'reenter' also '' (not said)
--       11 limit of a shared hold: '0' for none
--       12 idempotency record's key hash, or '' (see lib.lua: P:{N}:i:)
--       13 the request body's hash (with 12)
--       14 the session's remaining ms, or '': the hold (or the ticket's grant)
--          lasts until the session's deadline, and ARGV 2 is not used
--       15 not after: Redis ms after which this call must change nothing, or ''
--       16 poll id: names the caller's wait on its ticket (mode 'fair')
--       17 request nonce: the same for every attempt of one request, so that an
--          attempt sent again after a broken connection is not taken for a replay
--       18 the session's hash, 19 this hold's member there (with 14)
-- Replies:
--   {'granted', fence, count, pttl, at, owner, ttl, now, shared, limit}   new grant
--   {'reentered', ...the same}                        count + 1, lease renewed
--   {'not_held'}                                      mode 'reenter', lease not held (by this principal)
--   {'mode_mismatch', 'x' | 's'}                      mode 'reenter', the hold is of the other mode
--   {'limit_mismatch', limit}                         a shared request under another limit than the shared holds'
--   {'busy', pttl, owner, waiters}                    no room, or queued waiters first
--   {'queued', position, waiters, pttl, ticket ttl}   ticket created (mode 'fair')
--   {'ticket_granted', ...as granted}                 mode 'fair' retried after its ticket was granted
--   {'abandoned'}                                     the request was abandoned (abandon.lua) before this ran
--   {'replayed', ...as granted}                       the Idempotency-Key's hold, still held
--                                                     (re-entry with a key: the hold it re-entered)
--   {'replayed_ticket', ...as granted}                its ticket's hold, still held
--   {'replayed_queued', ...as queued}                 its ticket, still queued
--   {'idem_used'}                                     what the key made has ended
--   {'idem_mismatch'}                                 the key was used with another body
--   {'session_gone'}                                  the session's deadline has passed
--   {'expired'}                                       it ran after ARGV 15: nothing done
local now = now_ms()
if expired(now, ARGV[15]) then
  return {'expired'}
end
local lh, ttl, owner, mode, by = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[9]
local shared, limit = ARGV[10] == '1', ARGV[11]
local ik, body, remaining = ARGV[12], ARGV[13], tonumber(ARGV[14])
local th, tlh, tkey = ARGV[5], ARGV[6], KEYS[4]
local nonce = ARGV[17] or ''

-- copies_until is how long a copy of this call may still reach Redis and run
-- (Redis ms): its "not after"; without one (the gateway has no estimate of
-- this Redis's clock yet), as long as a deadline would have given it (the
-- gateway's callBudget, store/clock.go: 10 s), though nothing then stops a
-- copy later still.
local function copies_until(t)
  return tonumber(ARGV[15]) or (t + 10000)
end

-- replayed is the code of an answer made from a record: 'replayed' unless the
-- record is this very request's (an attempt sent again).
local function replay_code(rec_nonce, code, fresh)
  if nonce ~= '' and rec_nonce == nonce then
    return fresh
  end
  return code
end

if mode == 'reenter' then
  prune_shared(now)
  local kind, key = find_hold(lh)
  if not kind or redis.call('HGET', key, 'by') ~= by then
    return {'not_held'}
  end
  if ARGV[10] ~= '' and shared ~= (kind == 's') then
    return {'mode_mismatch', kind}
  end
  if ik ~= '' then -- a re-entry with an Idempotency-Key counts once
    local rec = redis.call('HMGET', record_key(ik), 'b', 'k', 'h', 'n')
    if rec[1] then
      if rec[1] ~= body then
        return {'idem_mismatch'}
      end
      if rec[2] == 'r' and rec[3] == lh then
        return hold_reply(replay_code(rec[4], 'replayed', 'reentered'), now, kind, key)
      end
      return {'idem_used'}
    end
    redis.call('HSET', record_key(ik), 'b', body, 'k', 'r', 'h', lh, 'n', nonce)
    redis.call('PEXPIRE', record_key(ik), math.max(redis.call('PTTL', key), ttl) + IDEMPOTENCY_GRACE_MS)
  end
  redis.call('HINCRBY', key, 'count', 1)
  redis.call('HSET', key, 'ttl', ttl, 'tk', '', 'pc', '') -- its owner has it: see renew.lua
  set_deadline(kind, key, lh, ttl, now)
  return hold_reply('reentered', now, kind, key)
end

if ik ~= '' then
  local rec = redis.call('HMGET', record_key(ik), 'b', 'k', 'n')
  if rec[1] then
    if rec[1] ~= body then
      return {'idem_mismatch'}
    end
    settle(now)
    local kind, key = find_hold(lh)
    if rec[2] == 'h' and kind then
      return hold_reply(replay_code(rec[3], 'replayed', 'granted'), now, kind, key)
    end
    if rec[2] == 't' then
      kind, key = find_hold(tlh)
      if kind then
        if redis.call('HGET', key, 'tk') == th then -- an unclaimed grant: the retry claims it
          redis.call('HSET', key, 'tk', '')
          set_deadline(kind, key, tlh, tonumber(redis.call('HGET', key, 'ttl')), now)
        end
        return hold_reply(replay_code(rec[3], 'replayed_ticket', 'ticket_granted'), now, kind, key)
      end
      if redis.call('EXISTS', tkey) == 1 then
        keep_ticket(tkey, now, tonumber(ARGV[8]), ARGV[16])
        local q = queued_reply(th, tkey, now)
        q[1] = replay_code(rec[3], 'replayed_queued', 'queued')
        return q
      end
    end
    return {'idem_used'}
  end
end

local sd = ''
if remaining then
  ttl = remaining
  if ttl <= 0 then
    return {'session_gone'}
  end
  sd = str(now + ttl)
end
settle(now)
-- The same request, already granted (a retry after a broken connection): never
-- count it twice, never queue it. Its grant left a tombstone (below), so this
-- comes first.
local kind, key = find_hold(lh)
if kind then
  return hold_reply('granted', now, kind, key)
end
if mode == 'fair' then
  kind, key = find_hold(tlh)
  if kind then
    return hold_reply('ticket_granted', now, kind, key)
  end
  if redis.call('EXISTS', tkey) == 1 then -- its ticket, still queued: a retry is answered it
    keep_ticket(tkey, now, tonumber(ARGV[8]), ARGV[16])
    return queued_reply(th, tkey, now)
  end
end
-- Past its hold, its ticket and its ticket's grant, a copy of a request that
-- was granted or queued (or undone, abandon.lua) finds its tombstone.
if entombed(lh, nonce) then
  return {'abandoned'}
end

-- record notes, for an Idempotency-Key, what the request made (a hold or a
-- ticket, under hash h), for as long as that lives plus the grace.
local function record(k, h, life)
  if ik ~= '' then
    redis.call('HSET', record_key(ik), 'b', body, 'k', k, 'h', h, 'n', nonce)
    redis.call('PEXPIRE', record_key(ik), life + IDEMPOTENCY_GRACE_MS)
  end
end

local ok, mismatch = fits(shared, limit)
if mismatch then
  return {'limit_mismatch', redis.call('GET', slkey)}
end
if ok and not head_ticket() then
  record('h', lh, ttl)
  grant(shared, limit, lh, ttl, owner, by, now, next_fence(now, ttl), ttl, '', ik)
  local hkey = (shared and (sprefix .. lh)) or lock
  if ik == '' then
    -- A copy of this call still on its way (a retry answered first, the first
    -- attempt held up in the network) must not grant the hold again once it
    -- has ended, released or run out: until this call's deadline, past which
    -- such a copy changes nothing by itself, it finds this hold (above) or this
    -- tombstone. With an Idempotency-Key, its record answers the copy instead.
    tombstone(lh, copies_until(now), now)
  end
  if sd ~= '' then
    redis.call('HSET', hkey, 'sd', sd, 'ss', ARGV[18], 'sm', ARGV[19])
  end
  if ik ~= '' then
    -- Duplicates of this request may wait elsewhere: they are answered with this hold.
    redis.call(PUBLISH, channel, 'i:' .. lh)
  end
  if shared then
    if shared_count() > 1 then
      redis.call(PUBLISH, channel, 'c') -- a held lock's holds changed: watchers look
    end
    return hold_reply('granted', now, 's', sprefix .. lh)
  end
  return hold_reply('granted', now, 'x', lock)
end

if mode == 'fair' then
  if redis.call('EXISTS', tkey) == 0 then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local seq = 1
    if #last > 0 then
      seq = tonumber(last[2]) + 1
    end
    redis.call('ZADD', queue, seq, th)
    local sh = '0'
    if shared then
      sh = '1'
    end
    redis.call('HSET', tkey, 'lh', tlh, 'ttl', ttl, 'owner', owner, 'tt', ARGV[7], 'by', by, 'sh', sh, 'lim', limit,
      'ik', ik, 'sd', sd, 'ss', ARGV[18] or '', 'sm', ARGV[19] or '')
    record('t', th, 0)
  end
  keep_ticket(tkey, now, tonumber(ARGV[8]), ARGV[16])
  if ik == '' then
    -- As a grant's (above): a copy of this call still on its way must not,
    -- once the ticket has been granted and released (or has gone), grant the
    -- lock under the request's own lease, nor queue the ticket again, both
    -- unknown to anyone. Its client's retry finds the ticket (above) first.
    tombstone(lh, copies_until(now), now)
  end
  return queued_reply(th, tkey, now)
end

return busy_reply(now)
