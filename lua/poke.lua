-- poke.lua: called by a waiting gateway when a hold's lease, or the head
-- ticket, should have run out. Expiry runs no script, so this is what hands an
-- expired lock (or a slot of a shared one, or the place of a dead head ticket)
-- on, and announces it.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: none
-- Replies:
--   {'held', wake}   something still holds or waits: look again in wake ms
--   {'free'}         no holds and no queue left
local now = now_ms()
prune_shared(now)
head_ticket()
if redis.call('EXISTS', lock) == 0 then
  handoff(now, true)
end
if soonest(now) or redis.call('EXISTS', queue) == 1 then
  return {'held', wake_ms(now)}
end
return {'free'}
