-- session_end.lua: end a session and return its members, for the gateway to
-- release each hold and cancel each ticket. What is left of it is kept only so
-- that a retry of its creation (same Idempotency-Key) is told it has ended.
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 by
-- Replies:
--   {'ended', ttl, 0, now, owner, members...}
--   {'gone'}
local now = now_ms()
if not alive(now, ARGV[1]) then
  return {'gone'}
end
local out = session_reply('ended', now)
out[3] = 0
redis.call('HSET', sess, 'dl', '0')
if grace() > 0 then
  redis.call('PEXPIRE', sess, grace())
else
  redis.call('DEL', sess)
end
redis.call('DEL', members)
return out
