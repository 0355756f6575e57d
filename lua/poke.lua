-- poke.lua: called by a waiting gateway when a hold's lease should have run out.
-- Expiry runs no script, so this is what hands an expired lock (or a slot of a
-- shared one) on, and announces it.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: none
-- Replies:
--   {'held', pttl}   still held: pttl is the time until the soonest hold ends
--   {'free'}         no holds left (handed to head tickets, or 'r' announced)
local now = now_ms()
local pruned = prune_shared(now)
if redis.call('EXISTS', lock) == 0 then
  if pruned > 0 or shared_count() == 0 then
    handoff(now, true)
  end
end
local key, pttl = soonest(now)
if key then
  return {'held', pttl}
end
return {'free'}
