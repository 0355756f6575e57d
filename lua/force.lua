-- force.lua: end every hold of a lock, whoever holds it, and hand it to the head
-- live tickets.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: none
-- Replies:
--   {'forced', holds removed}
local now = now_ms()
prune_shared(now)
local n = 0
local lh = redis.call('HGET', lock, 'lease')
if lh then
  end_hold('x', lock, lh, now)
  n = 1
end
for _, h in ipairs(redis.call('ZRANGE', shkey, 0, -1)) do
  end_hold('s', sprefix .. h, h, now)
  n = n + 1
end
if n > 0 then
  handoff(now, true)
else
  settle(now)
end
return {'forced', n}
