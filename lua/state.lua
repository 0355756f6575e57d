-- state.lua: the lock's state, or one lease's. Hands an expired lock to the head
-- live ticket first, so nobody ever observes a free lock ahead of a live queue.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: 1 lease hash, or '' for the lock's state
-- Replies:
--   {'held', fence, count, pttl, at, owner, ttl, now}            ARGV[1] given and held
--   {'not_held'}                                                 ARGV[1] given, not held
--   {'state', held 0/1, owner, count, fence, pttl, waiters, now} ARGV[1] empty
local now = now_ms()
local held = settle(now)
if ARGV[1] ~= '' then
  if redis.call('HGET', lock, 'lease') ~= ARGV[1] then
    return {'not_held'}
  end
  return lease_reply('held', now)
end
if not held then
  return {'state', 0, '', 0, redis.call('GET', fencekey) or '0', 0, waiters(), str(now)}
end
local h = redis.call('HMGET', lock, 'owner', 'count', 'fence')
return {'state', 1, h[1], tonumber(h[2]), h[3], redis.call('PTTL', lock), waiters(), str(now)}
