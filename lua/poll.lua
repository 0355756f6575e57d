-- poll.lua: a fair waiter's check. Keeps its ticket alive, reports its position, or
-- hands over the hold granted to it (claiming an unclaimed handoff extends the
-- hold from the claim window to the requested ttl).
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 ticket key P:{N}:t:<ticket hash>
-- ARGV: 1 ticket hash
--       2 lease hash the ticket is granted under
--       3 poll ms: how long the caller will now wait ('0': no poll in flight after this)
--       4 by: the principal polling
--       5 poll id: names this poll (unpoll.lua ends it by that name)
--       6 not after: Redis ms after which this call must change nothing, or ''
-- Replies:
--   {'granted', fence, count, pttl, at, owner, ttl, now, shared, limit}
--   {'queued', position, waiters, pttl, ticket ttl}
--   {'gone'}                                        expired, cancelled, unknown, or another principal's
--   {'expired'}                                     it ran after ARGV 6: nothing done
local now = now_ms()
if expired(now, ARGV[6]) or redis.call('EXISTS', lock .. ':x:p:' .. ARGV[5]) == 1 then
  return {'expired'} -- too late, or this poll was undone (unpoll.lua) before it ran
end
local th, tlh, tkey, by = ARGV[1], ARGV[2], KEYS[4], ARGV[4]
settle(now)
local kind, key = find_hold(tlh)
if kind then
  if redis.call('HGET', key, 'by') ~= by then
    return {'gone'}
  end
  if redis.call('HGET', key, 'tk') == th then
    redis.call('HSET', key, 'tk', '', 'pc', ARGV[5])
    set_deadline(kind, key, tlh, tonumber(redis.call('HGET', key, 'ttl')), now)
  else
    -- Claimed already: this poll hands it over too, so the end of the poll
    -- that claimed it no longer means the owner never got it (unpoll.lua).
    local pc = redis.call('HGET', key, 'pc') or ''
    if pc ~= '' and not has_word(pc, ARGV[5]) then
      redis.call('HSET', key, 'pc', pc .. ' ' .. ARGV[5])
    end
  end
  return hold_reply('granted', now, kind, key)
end
if redis.call('EXISTS', tkey) == 0 then
  redis.call('ZREM', queue, th)
  return {'gone'}
end
if redis.call('HGET', tkey, 'by') ~= by then
  return {'gone'}
end
keep_ticket(tkey, now, tonumber(ARGV[3]), ARGV[5])
if tonumber(ARGV[3]) == 0 then
  fit_fence(now) -- the ticket may now end sooner than the fence key was kept for
end
return queued_reply(th, tkey, now)
