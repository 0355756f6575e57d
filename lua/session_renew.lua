-- session_renew.lua: extend a session to ttl (0: its last ttl) and return its
-- members, for the gateway to renew each hold to the same ttl.
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 by, 2 ttl ms or '0'
-- Replies:
--   {'renewed', ttl, remaining, now, owner, members...}
--   {'gone'}

local function session_renew(KEYS, ARGV)
  bind_session(KEYS)
  local now = now_ms()
  if not alive(now, ARGV[1]) then
    return {'gone'}
  end
  local ttl = tonumber(ARGV[2])
  if ttl == 0 then
    ttl = tonumber(redis.call('HGET', sess, 'ttl'))
  end
  redis.call('HSET', sess, 'ttl', ttl, 'dl', str(now + ttl))
  redis.call('PEXPIRE', sess, ttl + grace())
  if redis.call('EXISTS', members) == 1 then
    redis.call('PEXPIRE', members, ttl)
  end
  return session_reply('renewed', now)
end
