-- renew.lua: extend a held lease. Never revives one that ran out.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: 1 lease hash
--       2 ttl ms; '0' keeps the ttl of the last grant or renewal
--       3 by: the principal renewing
-- Replies:
--   {'renewed', fence, count, pttl, at, owner, ttl, now, shared, limit}
--   {'not_held'}
local now = now_ms()
prune_shared(now)
local lh = ARGV[1]
local kind, key = find_hold(lh)
if not kind or redis.call('HGET', key, 'by') ~= ARGV[3] then
  return {'not_held'}
end
local ttl = ARGV[2]
if ttl == '0' then
  ttl = redis.call('HGET', key, 'ttl')
end
local before = redis.call('PTTL', key)
-- A renewal shows its owner has the lease: no poll's end may take it back (pc).
redis.call('HSET', key, 'ttl', ttl, 'tk', '', 'pc', '')
set_deadline(kind, key, lh, tonumber(ttl), now)
if tonumber(ttl) < before then
  -- The hold now ends sooner than waiters were told: their timers look again.
  redis.call(PUBLISH, channel, 'w:' .. ttl)
end
return hold_reply('renewed', now, kind, key)
