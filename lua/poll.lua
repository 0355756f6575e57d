-- poll.lua: a fair waiter's check. Keeps its ticket alive, reports its
-- position, or hands over the hold granted to it (claiming a handoff that
-- waits for its claim extends it from the claim window to the requested ttl).
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: 1 not after: Redis ms past which this call changes nothing
--       2 ticket hash
--       3 the lease hash the ticket is granted under
--       4 poll ms: how long the caller now waits ('0': no poll in flight after this)
--       5 by: the principal polling
--       6 poll id: names this poll (undo.lua takes it out by that name)
-- Replies:
--   {'granted', fence, count, pttl, at, owner, ttl, now, shared, limit}
--   {'queued', position, waiters, wake, ticket ttl}
--   {'gone'}        expired, cancelled, unknown, or another principal's
--   {'expired'}     it ran after ARGV 1: nothing done

local function poll_ticket(L, now, ARGV)
  local th, by, tkey = ARGV[2], ARGV[5], tprefix .. ARGV[2]
  local _, h = find(L, ARGV[3], now)
  if h then
    if h.by ~= by then
      return {'gone'}
    end
    hand_out(L, h, now, false, ARGV[6])
    return hold_reply('granted', now, h)
  end
  if redis.call('EXISTS', tkey) == 0 then
    redis.call('ZREM', queue, th)
    return {'gone'}
  end
  if redis.call('HGET', tkey, 'by') ~= by then
    return {'gone'}
  end
  keep_ticket(L, tkey, now, tonumber(ARGV[4]), ARGV[6])
  if tonumber(ARGV[4]) > 0 then
    interest(L, now, tonumber(ARGV[4])) -- its timer hears of a hold that ends sooner ('w:')
  end
  return queued_reply(L, th, tkey, now)
end

local function poll(KEYS, ARGV)
  local now = now_ms()
  if expired(now, ARGV[1]) then
    return {'expired'}
  end
  bind(KEYS[1])
  derive()
  local L = load(now)
  settle(L, now)
  local reply = poll_ticket(L, now, ARGV)
  flush(L, now)
  return reply
end
