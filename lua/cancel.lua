-- cancel.lua: leave the queue. A grant made to the ticket and not yet claimed is
-- given up too, and passes on to the next live tickets at once.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 ticket key P:{N}:t:<ticket hash>
-- ARGV: 1 ticket hash
--       2 lease hash the ticket is granted under
--       3 by: the principal cancelling
-- Replies:
--   {'cancelled'}
--   {'gone'}       expired, already cancelled, already claimed, unknown, or another principal's
local now = now_ms()
local th, tlh, tkey, by = ARGV[1], ARGV[2], KEYS[4], ARGV[3]
prune_shared(now)
if redis.call('EXISTS', tkey) == 1 then
  if redis.call('HGET', tkey, 'by') ~= by then
    return {'gone'}
  end
  drop_ticket(th, tkey)
  settle(now)
  if redis.call('EXISTS', lock) == 0 then
    -- The queue moved: the new head, or (the queue empty) a non-fair waiter, may fit.
    handoff(now, true)
  end
  return {'cancelled'}
end
redis.call('ZREM', queue, th)
local kind, key = find_hold(tlh)
if kind and redis.call('HGET', key, 'tk') == th and redis.call('HGET', key, 'by') == by then
  end_hold(kind, key, tlh, now)
  handoff(now, true)
  return {'cancelled'}
end
return {'gone'}
