-- session_check.lua: whether a session still lives: asked after a hold (or a
-- ticket) was made in it, since the session may have ended (a DELETE) between
-- the member joining and the lock's script running.
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 by
-- Replies: {'alive'} | {'gone'}

local function session_check(KEYS, ARGV)
  bind_session(KEYS)
  if alive(now_ms(), ARGV[1]) then
    return {'alive'}
  end
  return {'gone'}
end
