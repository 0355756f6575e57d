-- unpoll.lua: a ticket poll ends without its answer reaching the client (the
-- client hung up, or the call's own answer was lost). The poll no longer keeps
-- the ticket alive (its other polls in flight still do); a grant that this very
-- poll claimed, or that was made at its full ttl because this poll was in
-- flight, becomes an unclaimed handoff again: kept for the ticket's owner until
-- the ticket ttl from the grant, claimed by its next poll, and passed on
-- otherwise (at once when that time has passed). A grant another poll also
-- handed over (pc lists them), or whose lease was renewed since, is left
-- alone, and so is anything of another principal.
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
--   {'unclaimed'}   this poll's grant waits for a claim until the ticket ttl from the grant
--   {'passed'}      this poll's grant was older than the ticket ttl: it passed on
--   {'kept'}        granted, but not only by this poll, or renewed: left as it is
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
  fit_fence(now) -- the ticket may now end sooner than the fence key was kept for
  return {'queued'}
end
local kind, key = find_hold(tlh)
if not kind or redis.call('HGET', key, 'by') ~= by then
  return {'gone'}
end
local pc = redis.call('HGET', key, 'pc') or ''
if pid == '' or not has_word(pc, pid) or redis.call('HGET', key, 'count') ~= '1' then
  return {'kept'}
end
pc = without_word(pc, pid)
if pc ~= '' then -- another poll handed it over too, and may have reached the owner
  redis.call('HSET', key, 'pc', pc)
  return {'kept'}
end
-- The ticket's owner gets the ticket ttl from the grant, not from now (this
-- undo may come long after): past it, the grant passes on.
local left = tonumber(redis.call('HGET', key, 'at')) + tt - now
if left <= 0 then
  end_hold(kind, key, tlh, now)
  handoff(now, true)
  return {'passed'}
end
redis.call('HSET', key, 'tk', th, 'pc', '')
if redis.call('PTTL', key) > left then
  redis.call('PEXPIRE', key, left)
  if kind == 's' then
    redis.call('ZADD', shkey, str(now + left), tlh)
    fit_shared_keys(now)
  end
  fit_fence(now)
  -- The hold now ends sooner than waiters were told: their timers look again.
  redis.call(PUBLISH, channel, 'w:' .. str(left))
end
return {'unclaimed'}
