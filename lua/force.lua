-- force.lua: end every hold of a lock, whoever holds it, and hand it to the head
-- live tickets.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: none
-- Replies:
--   {'forced', holds removed}
local now = now_ms()
prune_shared(now)
local n = redis.call('DEL', lock)
for _, lh in ipairs(redis.call('ZRANGE', shkey, 0, -1)) do
  redis.call('DEL', sprefix .. lh)
  n = n + 1
end
redis.call('DEL', shkey, slkey)
if n > 0 then
  handoff(now, true)
else
  settle(now)
end
return {'forced', n}
