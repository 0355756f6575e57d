-- poke.lua: called by a waiting gateway when the holder's lease should have run
-- out. Expiry runs no script, so this is what hands an expired lock on.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: none
-- Replies:
--   {'held', pttl}   still held (renewed, or a new holder)
--   {'free'}         it was free: handed to the head ticket, or 'r' announced
local now = now_ms()
if redis.call('EXISTS', lock) == 1 then
  return {'held', redis.call('PTTL', lock)}
end
handoff(now)
return {'free'}
