-- cancel.lua: leave the queue. A grant made to the ticket that nobody has
-- shown to have reached its owner (waiting for its claim, or handed to polls
-- whose answers may never have arrived) is given up too, and passes on at
-- once; once renewed or re-entered, the lease is its owner's.
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: 1 not after: Redis ms past which this call changes nothing
--       2 ticket hash
--       3 the lease hash the ticket is granted under
--       4 by: the principal cancelling
-- Replies:
--   {'cancelled'}
--   {'gone'}        expired, already cancelled, its lease renewed, unknown, or another principal's
--   {'expired'}     it ran after ARGV 1: nothing done

local function cancel_ticket(L, now, ARGV)
  local th, by, tkey = ARGV[2], ARGV[4], tprefix .. ARGV[2]
  if redis.call('EXISTS', tkey) == 1 then
    if redis.call('HGET', tkey, 'by') ~= by then
      return {'gone'}
    end
    drop_ticket(L, th, tkey)
    head_ticket(L)
    if not L.x then
      handoff(L, now, true) -- the queue moved: its new head, or a non-fair waiter, may fit
    end
    return {'cancelled'}
  end
  redis.call('ZREM', queue, th)
  local kind, h = find(L, ARGV[3], now)
  if h and h.by == by and (h.tk == th or (h.told ~= '1' and h.pc ~= '')) then
    end_hold(L, kind, h, now)
    handoff(L, now, true)
    return {'cancelled'}
  end
  return {'gone'}
end

local function cancel(KEYS, ARGV)
  local now = now_ms()
  if expired(now, ARGV[1]) then
    return {'expired'}
  end
  bind(KEYS[1])
  derive()
  local L = load(now)
  prune(L, now)
  local reply = cancel_ticket(L, now, ARGV)
  flush(L, now)
  return reply
end
