-- session_end.lua: end a session (it takes no new holds from now on) and return
-- its members, for the gateway to release each hold and cancel each ticket;
-- session_finish.lua then drops what is left. A session already ended but not
-- finished (a DELETE cut short) answers the same again.
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 by
-- Replies:
--   {'ended', ttl, 0, now, owner, members...}
--   {'gone'}

local function session_end(KEYS, ARGV)
  bind_session(KEYS)
  local now = now_ms()
  local s = redis.call('HMGET', sess, 'by', 'dl')
  if s[1] ~= ARGV[1] or (tonumber(s[2]) or 0) < now and s[2] ~= '0' then
    return {'gone'}
  end
  redis.call('HSET', sess, 'dl', '0')
  local out = session_reply('ended', now)
  out[3] = 0
  return out
end
