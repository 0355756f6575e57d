-- renew.lua: extend a held lease. Never revives one that ran out.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: 1 lease hash
--       2 ttl ms; '0' keeps the ttl of the last grant or renewal
-- Replies:
--   {'renewed', fence, count, pttl, at, owner, ttl, now}
--   {'not_held'}
local now = now_ms()
if redis.call('HGET', lock, 'lease') ~= ARGV[1] then
  return {'not_held'}
end
local ttl = ARGV[2]
if ttl == '0' then
  ttl = redis.call('HGET', lock, 'ttl')
end
redis.call('HSET', lock, 'ttl', ttl, 'tk', '')
redis.call('PEXPIRE', lock, ttl)
keep_fence(tonumber(ttl))
return lease_reply('renewed', now)
