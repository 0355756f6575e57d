-- poll.lua: a fair waiter's check. Keeps its ticket alive, reports its position, or
-- hands over the lease granted to it (claiming an unclaimed handoff extends the lease
-- from the claim window to the requested ttl).
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 ticket key P:{N}:t:<ticket hash>
-- ARGV: 1 ticket hash
--       2 lease hash the ticket is granted under
--       3 poll ms: how long the caller will now wait ('0': no poll in flight after this)
-- Replies:
--   {'granted', fence, count, pttl, at, owner, ttl, now}
--   {'queued', position, waiters, pttl, ticket ttl}
--   {'gone'}                                        expired, cancelled or unknown
local now = now_ms()
local th, tkey = ARGV[1], KEYS[4]
settle(now)
if redis.call('HGET', lock, 'lease') == ARGV[2] then
  if redis.call('HGET', lock, 'tk') == th then
    redis.call('HSET', lock, 'tk', '')
    local ttl = tonumber(redis.call('HGET', lock, 'ttl'))
    redis.call('PEXPIRE', lock, ttl)
    keep_fence(ttl)
  end
  return lease_reply('granted', now)
end
if redis.call('EXISTS', tkey) == 0 then
  redis.call('ZREM', queue, th)
  return {'gone'}
end
keep_ticket(tkey, now, tonumber(ARGV[3]))
return queued_reply(th, tkey)
