-- session_finish.lua: drop an ended session once its holds are released. With
-- an Idempotency-Key, the session key stays for the grace, so that a retry of its
-- creation is told it ended; its deadline becomes -1, finished, so that a
-- DELETE sent again now finds no session (session_end.lua).
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 by
-- Replies: {'finished'}

local function session_finish(KEYS, ARGV)
  bind_session(KEYS)
  if redis.call('HGET', sess, 'by') == ARGV[1] and redis.call('HGET', sess, 'dl') == '0' then
    redis.call('DEL', members)
    if grace() > 0 then
      redis.call('HSET', sess, 'dl', '-1')
      redis.call('PEXPIRE', sess, grace())
    else
      redis.call('DEL', sess)
    end
  end
  return {'finished'}
end
