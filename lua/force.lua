-- force.lua: free a lock whoever holds it, and hand it to the head live ticket.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: none
-- Replies:
--   {'forced', 1 if a holder was removed else 0}
local now = now_ms()
if redis.call('DEL', lock) == 1 then
  handoff(now)
  return {'forced', 1}
end
settle(now)
return {'forced', 0}
