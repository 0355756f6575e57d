-- session_join.lua: add a member (a hold about to be asked for, or a ticket)
-- before the lock's own script runs; session_leave.lua takes it back when
-- nothing was granted or queued.
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 by, 2 member
-- Replies:
--   {'joined', remaining ms}
--   {'gone'}
local now = now_ms()
if not alive(now, ARGV[1]) then
  return {'gone'}
end
local remaining = tonumber(redis.call('HGET', sess, 'dl')) - now
redis.call('SADD', members, ARGV[2])
redis.call('PEXPIRE', members, math.max(remaining, 1))
return {'joined', remaining}
