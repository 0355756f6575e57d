-- acquire.lua: grant a lock, re-enter it, queue a fair waiter, or report it busy.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 the caller's ticket key
--       P:{N}:t:<ticket hash> (any key of the lock's slot when mode is not 'fair')
-- ARGV: 1 lease hash (SHA-256 of the lease id: a new one, or the held one with
--         mode 'reenter')
--       2 ttl ms
--       3 owner label
--       4 mode: 'new' | 'fair' (queue when busy) | 'reenter'
--       5 ticket hash (mode 'fair')
--       6 lease hash the ticket will be granted under (mode 'fair')
--       7 ticket ttl ms (mode 'fair')
--       8 poll ms: how long the caller will now wait for its ticket (mode 'fair')
-- Replies:
--   {'granted', fence, count, pttl, at, owner, ttl, now}    new grant
--   {'reentered', fence, count, pttl, at, owner, ttl, now}  count + 1, lease renewed
--   {'not_held'}                                            mode 'reenter', lease not held
--   {'busy', pttl, owner, waiters}                          held by someone else, or queued waiters first
--   {'queued', position, waiters, pttl, ticket ttl}         mode 'fair', ticket created
--   {'ticket_granted', fence, count, pttl, at, owner, ttl, now}  mode 'fair' retried after
--                                                           its ticket was granted
--   {'abandoned'}                                           the request was abandoned
--                                                           (abandon.lua) before this ran
local now = now_ms()
local lh, ttl, owner, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]

if mode == 'reenter' then
  if redis.call('HGET', lock, 'lease') ~= lh then
    return {'not_held'}
  end
  redis.call('HINCRBY', lock, 'count', 1)
  redis.call('HSET', lock, 'ttl', ttl, 'tk', '')
  redis.call('PEXPIRE', lock, ttl)
  keep_fence(ttl)
  return lease_reply('reentered', now)
end

if redis.call('EXISTS', lock .. ':x:' .. lh) == 1 then
  return {'abandoned'}
end
if not settle(now) then
  grant(lh, ttl, owner, now, next_fence(now, ttl), ttl, '')
  return lease_reply('granted', now)
end
if redis.call('HGET', lock, 'lease') == lh then
  -- The same request, already granted: never count it twice.
  return lease_reply('granted', now)
end

if mode == 'fair' then
  local th, tkey = ARGV[5], KEYS[4]
  if redis.call('HGET', lock, 'lease') == ARGV[6] then
    -- A retried request whose ticket was granted in between: never queue it again.
    return lease_reply('ticket_granted', now)
  end
  if redis.call('EXISTS', tkey) == 0 then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local seq = 1
    if #last > 0 then
      seq = tonumber(last[2]) + 1
    end
    redis.call('ZADD', queue, seq, th)
    redis.call('HSET', tkey, 'lh', ARGV[6], 'ttl', ttl, 'owner', owner, 'tt', ARGV[7])
  end
  keep_ticket(tkey, now, tonumber(ARGV[8]))
  return queued_reply(th, tkey)
end

return {'busy', redis.call('PTTL', lock), redis.call('HGET', lock, 'owner'), waiters()}
