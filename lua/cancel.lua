-- cancel.lua: leave the queue. A grant made to the ticket is given up too, and
-- passes on to the next live tickets at once, unless its lease was renewed or
-- re-entered since (which shows its owner has it).
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 ticket key P:{N}:t:<ticket hash>
-- ARGV: 1 ticket hash
--       2 lease hash the ticket is granted under
--       3 by: the principal cancelling
-- Replies:
--   {'cancelled'}
--   {'gone'}       expired, already cancelled, its lease renewed, unknown, or another principal's
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
  fit_fence(now)
  return {'cancelled'}
end
redis.call('ZREM', queue, th)
local kind, key = find_hold(tlh)
-- A grant nobody has shown to have reached the owner is given up: unclaimed
-- (tk), or handed to polls (pc) whose answers may never have arrived (a
-- gateway killed with the poll in flight). Once renewed or re-entered, the
-- lease is its owner's: 'gone'.
if kind and redis.call('HGET', key, 'by') == by and
    (redis.call('HGET', key, 'tk') == th or (redis.call('HGET', key, 'pc') or '') ~= '') then
  end_hold(kind, key, tlh, now)
  handoff(now, true)
  return {'cancelled'}
end
return {'gone'}
