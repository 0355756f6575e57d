-- session_get.lua: a session and its members.
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 by
-- Replies:
--   {'session', ttl, remaining, now, owner, members...}
--   {'gone'}    expired, ended, unknown, or another principal's

local function session_get(KEYS, ARGV)
  bind_session(KEYS)
  local now = now_ms()
  if not alive(now, ARGV[1]) then
    return {'gone'}
  end
  return session_reply('session', now)
end
