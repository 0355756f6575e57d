-- acquire.lua: grant a hold (exclusive or shared), re-enter one, queue a fair
-- waiter, or report the lock busy.
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
--       9 by: the principal making the request
--       10 shared: '1' | '0'; with mode 'reenter' also '' (not said)
--       11 limit of a shared hold: '0' for none
-- Replies:
--   {'granted', fence, count, pttl, at, owner, ttl, now, shared, limit}   new grant
--   {'reentered', ...the same}                        count + 1, lease renewed
--   {'not_held'}                                      mode 'reenter', lease not held (by this principal)
--   {'mode_mismatch', 'x' | 's'}                      mode 'reenter', the hold is of the other mode
--   {'limit_mismatch', limit}                         a shared request under another limit than the shared holds'
--   {'busy', pttl, owner, waiters}                    no room, or queued waiters first
--   {'queued', position, waiters, pttl, ticket ttl}   mode 'fair', ticket created
--   {'ticket_granted', ...as granted}                 mode 'fair' retried after its ticket was granted
--   {'abandoned'}                                     the request was abandoned (abandon.lua) before this ran
local now = now_ms()
local lh, ttl, owner, mode, by = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[9]
local shared, limit = ARGV[10] == '1', ARGV[11]

if mode == 'reenter' then
  prune_shared(now)
  local kind, key = find_hold(lh)
  if not kind or redis.call('HGET', key, 'by') ~= by then
    return {'not_held'}
  end
  if ARGV[10] ~= '' and shared ~= (kind == 's') then
    return {'mode_mismatch', kind}
  end
  redis.call('HINCRBY', key, 'count', 1)
  redis.call('HSET', key, 'ttl', ttl, 'tk', '')
  set_deadline(kind, key, lh, ttl, now)
  return hold_reply('reentered', now, kind, key)
end

if redis.call('EXISTS', lock .. ':x:' .. lh) == 1 then
  return {'abandoned'}
end
settle(now)
-- The same request, already granted (a retry after a broken connection): never
-- count it twice, never queue it.
local kind, key = find_hold(lh)
if kind then
  return hold_reply('granted', now, kind, key)
end
if mode == 'fair' then
  kind, key = find_hold(ARGV[6])
  if kind then
    return hold_reply('ticket_granted', now, kind, key)
  end
end

local ok, mismatch = fits(shared, limit)
if mismatch then
  return {'limit_mismatch', redis.call('GET', slkey)}
end
if ok and not head_ticket() then
  grant(shared, limit, lh, ttl, owner, by, now, next_fence(now, ttl), ttl, '')
  if shared then
    if shared_count() > 1 then
      redis.call('PUBLISH', channel, 'c') -- a held lock's holds changed: watchers look
    end
    return hold_reply('granted', now, 's', sprefix .. lh)
  end
  return hold_reply('granted', now, 'x', lock)
end

if mode == 'fair' then
  local th, tkey = ARGV[5], KEYS[4]
  if redis.call('EXISTS', tkey) == 0 then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local seq = 1
    if #last > 0 then
      seq = tonumber(last[2]) + 1
    end
    redis.call('ZADD', queue, seq, th)
    local sh = '0'
    if shared then
      sh = '1'
    end
    redis.call('HSET', tkey, 'lh', ARGV[6], 'ttl', ttl, 'owner', owner, 'tt', ARGV[7], 'by', by, 'sh', sh, 'lim', limit)
  end
  keep_ticket(tkey, now, tonumber(ARGV[8]))
  return queued_reply(th, tkey, now)
end

return busy_reply(now)
