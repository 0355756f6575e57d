-- session_leave.lua: remove members (holds that were not granted, or are gone).
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: members
-- Replies: {'left'}
if #ARGV > 0 then
  redis.call('SREM', members, unpack(ARGV))
end
return {'left'}
