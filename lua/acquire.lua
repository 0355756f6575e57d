-- acquire.lua: grant a hold (exclusive or shared), re-enter one, queue a fair
-- waiter, or report the lock busy; replay what an Idempotency-Key made.
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: 1 not after: Redis ms past which this call changes nothing
--       2 mode: 'new' | 'fair' (queue when busy) | 'reenter'
--       3 lease hash (a new one, or the held one with 'reenter')
--       4 ttl ms
--       5 owner label
--       6 by: the principal asking
--       7 shared: '1' | '0'; with 'reenter' also '' (not said)
--       8 limit of a shared hold: '0' for none
--       9 maker: this request's id, the same in each of its attempts
--       10 ticket hash (the ticket it queues under)
--       11 the lease hash that ticket is granted under
--       12 ticket ttl ms
--       13 poll ms: how long the caller now waits on its ticket ('fair')
--       14 poll id: names that wait
--       15 wait ms: how long the caller waits for news when busy ('new')
--       16 Idempotency-Key record hash, or ''
--       17 the request body's hash (with 16)
--       18 the session's remaining ms, or '': the hold (or the ticket's
--          grant) lasts until the session's deadline, and ARGV 4 is not used
--       19 the session's hash, 20 this hold's member there (with 18)
-- Replies:
--   {'granted', fence, count, pttl, at, owner, ttl, now, shared, limit}
--                                              a new hold (or this request's own, made by an earlier attempt)
--   {'reentered', ...the same}                 count + 1, lease renewed
--   {'ticket_granted', ...the same}            its ticket's grant, handed to this wait
--   {'replayed', ...}, {'replayed_ticket', ...}  what the Idempotency-Key made, still held
--   {'queued', position, waiters, wake, ticket ttl}  queued (mode 'fair'), or still queued
--   {'replayed_queued', ...the same}           the Idempotency-Key's ticket, still queued
--   {'busy', pttl, owner, waiters, wake}       no room, or queued waiters first
--   {'not_held'}                               'reenter': not held (by this principal)
--   {'mode_mismatch', 'x' | 's'}               'reenter': the hold is of the other mode
--   {'limit_mismatch', limit}                  a shared request under another limit than the shared holds'
--   {'idem_used'}                              what the key made has ended
--   {'idem_mismatch'}                          the key was used with another body
--   {'session_gone'}                           the session's deadline has passed
--   {'expired'}                                it ran after ARGV 1: nothing done

local function acquire_reenter(L, now, ARGV)
  local lh, ttl, mk, ik, body = ARGV[3], tonumber(ARGV[4]), ARGV[9], ARGV[16], ARGV[17]
  local kind, h = find(L, lh, now)
  if not h or h.by ~= ARGV[6] then
    return {'not_held'}
  end
  if ARGV[7] ~= '' and (ARGV[7] == '1') ~= h.shared then
    return {'mode_mismatch', kind}
  end
  if ik ~= '' then -- a re-entry with an Idempotency-Key counts once
    derive()
    local rkey = iprefix .. ik
    local rec = redis.call('HMGET', rkey, 'b', 'k', 'h', 'm')
    if rec[1] then
      if rec[1] ~= body then
        return {'idem_mismatch'}
      end
      if rec[2] == 'r' and rec[3] == lh then
        if rec[4] == mk then
          return hold_reply('reentered', now, h)
        end
        return hold_reply('replayed', now, h)
      end
      return {'idem_used'}
    end
    redis.call('HSET', rkey, 'b', body, 'k', 'r', 'h', lh, 'm', mk)
    redis.call('PEXPIRE', rkey, math.max(h.d - now, ttl) + GRACE_MS)
  end
  h.c, h.ttl = h.c + 1, ttl
  h.told, h.pc, h.tk = '1', '', ''
  set_deadline(L, h, ttl, now)
  return hold_reply('reentered', now, h)
end

-- acquire_replay answers from an Idempotency-Key's record rec: what it made,
-- to its maker's own later attempt as made, to anyone else as replayed (handed
-- to this request: its undo takes it back). nil: the record's maker made
-- nothing that lives, and this is the maker: go on as a fresh attempt.
local function acquire_replay(L, now, ARGV, rec)
  local own, pid, tkey = rec[4] == ARGV[9], ARGV[14], tprefix .. ARGV[10]
  if rec[2] == 'h' then
    local _, h = find(L, rec[3], now)
    if h then
      if own then
        return hold_reply('granted', now, h)
      end
      hand_out(L, h, now, false, ARGV[9])
      return hold_reply('replayed', now, h)
    end
  elseif rec[2] == 't' then
    local _, h = find(L, ARGV[11], now)
    if h then
      hand_out(L, h, now, false, pid)
      if own then
        return hold_reply('ticket_granted', now, h)
      end
      return hold_reply('replayed_ticket', now, h)
    end
    if redis.call('EXISTS', tkey) == 1 then
      keep_ticket(L, tkey, now, tonumber(ARGV[13]), pid)
      local q = queued_reply(L, ARGV[10], tkey, now)
      if not own then
        q[1] = 'replayed_queued'
      end
      return q
    end
  end
  if own then
    return nil
  end
  return {'idem_used'}
end

-- acquire_take grants, queues or reports busy (modes 'new' and 'fair').
local function acquire_take(L, now, ARGV)
  local mode, lh, ttl, mk = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[9]
  local shared, limit, th, pid = ARGV[7] == '1', ARGV[8], ARGV[10], ARGV[14]
  local ik, body = ARGV[16], ARGV[17]
  local tkey -- (only a keyed or a fair request needs its ticket's key)
  if ik ~= '' or mode == 'fair' then
    tkey = ticket_key(th)
  end
  settle(L, now)
  if ik ~= '' then
    local rec = redis.call('HMGET', iprefix .. ik, 'b', 'k', 'h', 'm')
    if rec[1] then
      if rec[1] ~= body then
        return {'idem_mismatch'}
      end
      local reply = acquire_replay(L, now, ARGV, rec)
      if reply then
        return reply
      end
    end
  else
    -- This very request's earlier attempt, run after all (its reply lost):
    -- answer what it made, never count or queue it twice.
    local _, h = find(L, lh, now)
    if h then
      return hold_reply('granted', now, h)
    end
    if mode == 'fair' then
      _, h = find(L, ARGV[11], now)
      if h then
        hand_out(L, h, now, false, pid)
        return hold_reply('ticket_granted', now, h)
      end
      if redis.call('EXISTS', tkey) == 1 then
        keep_ticket(L, tkey, now, tonumber(ARGV[13]), pid)
        return queued_reply(L, th, tkey, now)
      end
    end
  end
  local sd = ''
  if ARGV[18] ~= '' then
    ttl = tonumber(ARGV[18])
    if ttl <= 0 then
      return {'session_gone'}
    end
    sd = str(now + ttl)
  end
  local ok, mismatch = fits(L, shared, limit)
  if mismatch then
    return {'limit_mismatch', L.l}
  end
  if ok and not head_ticket(L) then
    local lim = ''
    if shared then
      lim = limit
    end
    local g = grant(L, now, ttl, lh, ttl, ARGV[6], '', '', mk, ik, sd, ARGV[19], ARGV[20], lim, ARGV[5])
    if ik ~= '' then
      redis.call('HSET', iprefix .. ik, 'b', body, 'k', 'h', 'h', lh, 'm', mk)
      redis.call('PEXPIRE', iprefix .. ik, ttl + GRACE_MS)
      announce(L, now, 'i:' .. lh) -- its duplicates may wait elsewhere: they answer with this hold
    end
    if shared and L.n > 1 then
      announce(L, now, 'c') -- a held lock's holds changed: watchers look
    end
    return hold_reply('granted', now, g)
  end
  if mode == 'fair' then
    if redis.call('EXISTS', tkey) == 0 then
      local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
      local seq = 1
      if #last > 0 then
        seq = tonumber(last[2]) + 1
      end
      redis.call('ZADD', queue, seq, th)
      local sh, lim = '0', '0'
      if shared then
        sh, lim = '1', limit
      end
      redis.call('HSET', tkey, 'lh', ARGV[11], 'ttl', ttl, 'owner', ARGV[5], 'tt', ARGV[12], 'by', ARGV[6], 'sh', sh,
        'lim', lim, 'ik', ik, 'mk', mk, 'sd', sd, 'ss', ARGV[19], 'sm', ARGV[20])
      if ik ~= '' then
        redis.call('HSET', iprefix .. ik, 'b', body, 'k', 't', 'h', th, 'm', mk)
      end
    end
    keep_ticket(L, tkey, now, tonumber(ARGV[13]), pid)
    if tonumber(ARGV[13]) > 0 then
      interest(L, now, tonumber(ARGV[13])) -- its timer hears of a hold that ends sooner ('w:')
    end
    return queued_reply(L, th, tkey, now)
  end
  local wait = tonumber(ARGV[15])
  if wait > 0 then
    interest(L, now, wait)
  end
  return busy_reply(L, now)
end

local function acquire(KEYS, ARGV)
  local now = now_ms()
  if expired(now, ARGV[1]) then
    return {'expired'}
  end
  bind(KEYS[1])
  local L = load(now)
  prune(L, now)
  local reply
  if ARGV[2] == 'reenter' then
    reply = acquire_reenter(L, now, ARGV)
  else
    reply = acquire_take(L, now, ARGV)
  end
  flush(L, now)
  return reply
end
