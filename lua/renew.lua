-- renew.lua: extend a held lease. Never revives one that ran out.
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: 1 not after: Redis ms past which this call changes nothing
--       2 lease hash
--       3 ttl ms; '0' keeps the ttl of the last grant or renewal
--       4 by: the principal renewing
-- Replies:
--   {'renewed', fence, count, pttl, at, owner, ttl, now, shared, limit}
--   {'not_held'}
--   {'expired'}     it ran after ARGV 1: nothing done

local function renew_hold(L, now, ARGV)
  local _, h = find(L, ARGV[2], now)
  if not h or h.by ~= ARGV[4] then
    return {'not_held'}
  end
  local ttl = tonumber(ARGV[3])
  if ttl == 0 then
    ttl = h.ttl
  end
  local before = h.d
  h.ttl = ttl
  h.told, h.pc, h.tk = '1', '', '' -- a renewal shows its owner has the lease
  set_deadline(L, h, ttl, now)
  if h.d < before then
    announce(L, now, 'w:' .. str(h.d - now)) -- it now ends sooner than waiters were told
  end
  return hold_reply('renewed', now, h)
end

local function renew(KEYS, ARGV)
  local now = now_ms()
  if expired(now, ARGV[1]) then
    return {'expired'}
  end
  bind(KEYS[1])
  local L = load(now)
  prune(L, now)
  local reply = renew_hold(L, now, ARGV)
  flush(L, now)
  return reply
end
