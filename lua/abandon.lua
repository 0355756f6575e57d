-- abandon.lua: undo what a request may have been granted or queued when its
-- client went away or its own answer was lost (a call that timed out may still
-- run once Redis reads it). The ticket leaves the queue; a hold under one of the
-- request's lease hashes ends, whatever its count, and the lock is handed on in
-- the same step; and a tombstone stops the request's own acquire script, should
-- it run after this one, from granting or queueing (acquire.lua checks it).
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 ticket key P:{N}:t:<ticket hash>
--       (any key of the lock's slot when there is no ticket)
-- ARGV: 1 the request's own lease hash
--       2 ticket hash, or ''
--       3 lease hash the ticket is granted under, or ''
--       4 0: no tombstone; else leave one, for this many ms when ARGV 5 is ''
--       5 not after: the request's own deadline (Redis ms), or '': the tombstone
--         lasts until then, after which the request's script, run late,
--         changes nothing by itself
--       6 (an idempotent request, whose hashes its key's other requests
--         share) its nonce (acquire.lua ARGV 17), and 7 its record's key hash:
--         the tombstone stops only this request's copies, and a hold or ticket
--         ends only when this request made it (its record says so); '' otherwise
-- Replies:
--   {'abandoned', 'released'}   a hold ended (and the lock was handed on)
--   {'abandoned', 'cancelled'}  a ticket left the queue, nothing was held
--   {'abandoned', 'none'}       nothing of the request was there
local now = now_ms()
local lh, th, tlh, tomb = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local nonce, ik = ARGV[6] or '', ARGV[7] or ''
if nonce ~= '' then
  local rec = redis.call('HMGET', record_key(ik), 'n', 'k')
  if tomb > 0 then
    tombstone(lh, tonumber(ARGV[5]) or (now + tomb), now, 'n:' .. nonce)
  end
  if rec[1] ~= nonce then -- this request made nothing (another with its key may have)
    return {'abandoned', 'none'}
  end
  if rec[2] ~= 't' then
    th = '' -- it made a hold: no ticket of its to drop
  end
elseif tomb > 0 then
  if ARGV[5] ~= '' then
    tombstone(lh, tonumber(ARGV[5]), now)
  else
    redis.call('SET', lock .. ':x:' .. lh, '1', 'PX', tomb)
  end
end
prune_shared(now)
local what = 'none'
if th ~= '' then
  if drop_ticket(th, KEYS[4]) == 1 then
    what = 'cancelled'
  end
end
for _, h in ipairs({lh, tlh}) do
  if h ~= '' then
    local kind, key = find_hold(h)
    if kind then
      end_hold(kind, key, h, now)
      handoff(now, true)
      return {'abandoned', 'released'}
    end
  end
end
settle(now)
fit_fence(now)
return {'abandoned', what}
