-- unpoll.lua: a ticket poll ends without its answer reaching the client (the
-- client hung up, or the call's own answer was lost). The ticket stays queued,
-- no longer marked as polled; a grant that this poll claimed, or that was made
-- at its full ttl because the poll was in flight, becomes an unclaimed handoff
-- again: kept for the ticket's owner for at most the ticket ttl, claimed by its
-- next poll, and passed on otherwise. Nobody else learns a ticket's lease id, so
-- nobody else can be holding it.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua); 4 ticket key P:{N}:t:<ticket hash>
-- ARGV: 1 ticket hash
--       2 lease hash the ticket is granted under
--       3 ticket ttl ms
-- Replies:
--   {'queued'}      still queued, kept for the ticket ttl from now
--   {'unclaimed'}   granted: the grant waits for a claim for at most the ticket ttl
--   {'gone'}        neither queued nor granted
local now = now_ms()
local th, tlh, tt = ARGV[1], ARGV[2], tonumber(ARGV[3])
settle(now)
if redis.call('EXISTS', KEYS[4]) == 1 then
  keep_ticket(KEYS[4], now, 0)
  return {'queued'}
end
local kind, key = find_hold(tlh)
if kind then
  if redis.call('HGET', key, 'count') == '1' and redis.call('PTTL', key) > tt then
    redis.call('HSET', key, 'tk', th)
    redis.call('PEXPIRE', key, tt)
    if kind == 's' then
      redis.call('ZADD', shkey, str(now + tt), tlh)
    end
  end
  return {'unclaimed'}
end
return {'gone'}
