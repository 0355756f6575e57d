-- cancel.lua: leave the queue. A grant made to the ticket and not yet claimed is
-- given up too, and passes on to the next live ticket at once.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 ticket key P:{N}:t:<ticket hash>
-- ARGV: 1 ticket hash
-- Replies:
--   {'cancelled'}
--   {'gone'}       expired, already cancelled, already claimed, or unknown
local now = now_ms()
local th, tkey = ARGV[1], KEYS[4]
redis.call('ZREM', queue, th)
if redis.call('DEL', tkey) == 1 then
  settle(now)
  return {'cancelled'}
end
if redis.call('HGET', lock, 'tk') == th then
  redis.call('DEL', lock)
  handoff(now)
  return {'cancelled'}
end
return {'gone'}
