-- unpoll.lua: a ticket poll ends without its answer reaching the client (the
-- client hung up, or the call's own answer was lost). The poll no longer keeps
-- the ticket alive (its other polls in flight still do); a grant that this very
-- poll claimed, or that was made at its full ttl because this poll was in
-- flight, becomes an unclaimed handoff again: kept for the ticket's owner for at
-- most the ticket ttl, claimed by its next poll, and passed on otherwise. A grant
-- an earlier poll delivered is left alone, and so is anything of another
-- principal.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 ticket key P:{N}:t:<ticket hash>
-- ARGV: 1 ticket hash
--       2 lease hash the ticket is granted under
--       3 ticket ttl ms
--       4 poll id: the poll that ended
--       5 by: the principal that polled
--       6 '' when the poll's call was answered (the client left); else its
--         deadline (Redis ms, or '0' when unknown): a tombstone then stops the
--         poll's script, should it still run, from doing anything
-- Replies:
--   {'queued'}      still queued
--   {'unclaimed'}   this poll's grant waits for a claim for at most the ticket ttl
--   {'kept'}        granted, but not by this poll: left as it is
--   {'gone'}        neither queued nor granted (to this principal)
local now = now_ms()
local th, tlh, tt, pid, by = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
if ARGV[6] ~= '' and pid ~= '' then
  if ARGV[6] ~= '0' then
    local k, life = lock .. ':x:p:' .. pid, tonumber(ARGV[6]) - now + 1
    if life > 0 then
      redis.call('SET', k, '1', 'PX', life)
    end
  else -- no deadline known: the store's fallback (store/abandon.go, tombstoneTTL)
    redis.call('SET', lock .. ':x:p:' .. pid, '1', 'PX', 30000)
  end
end
settle(now)
if redis.call('EXISTS', KEYS[4]) == 1 then
  if redis.call('HGET', KEYS[4], 'by') ~= by then
    return {'gone'}
  end
  keep_ticket(KEYS[4], now, 0, pid)
  return {'queued'}
end
local kind, key = find_hold(tlh)
if not kind or redis.call('HGET', key, 'by') ~= by then
  return {'gone'}
end
if redis.call('HGET', key, 'pc') ~= pid or pid == '' or redis.call('HGET', key, 'count') ~= '1' then
  return {'kept'}
end
if redis.call('PTTL', key) > tt then
  redis.call('HSET', key, 'tk', th, 'pc', '')
  redis.call('PEXPIRE', key, tt)
  if kind == 's' then
    redis.call('ZADD', shkey, str(now + tt), tlh)
    fit_shared_keys(now)
  end
  -- The hold now ends sooner than waiters were told: their timers look again.
  redis.call(PUBLISH, channel, 'w:' .. str(tt))
end
return {'unclaimed'}
