-- release.lua: release one hold; at zero, free the lock and in the same step hand
-- it to the head live ticket (or announce 'r' when nobody is queued).
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: 1 lease hash
-- Replies:
--   {'released', holds left, 1 if the lock was freed or handed on else 0}
--   {'not_held'}
local now = now_ms()
if redis.call('HGET', lock, 'lease') ~= ARGV[1] then
  return {'not_held'}
end
local left = redis.call('HINCRBY', lock, 'count', -1)
if left > 0 then
  return {'released', left, 0}
end
redis.call('DEL', lock)
handoff(now)
return {'released', 0, 1}
