-- release.lua: release one hold (or all of its count); when a hold ends, hand
-- the lock in the same step to the head live tickets that now fit (or announce
-- it: 'r' when nobody is queued, 'c' otherwise).
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: 1 lease hash
--       2 by: the principal releasing
--       3 '1': release the whole count at once; '0': one hold
-- Replies:
--   {'released', holds left, 1 if the hold ended else 0, its session's hash and
--    member there ('' for none: the gateway takes the member out of the session)}
--   {'not_held'}
local now = now_ms()
prune_shared(now)
local lh = ARGV[1]
local kind, key = find_hold(lh)
if not kind or redis.call('HGET', key, 'by') ~= ARGV[2] then
  return {'not_held'}
end
if ARGV[3] ~= '1' then
  local left = redis.call('HINCRBY', key, 'count', -1)
  if left > 0 then
    return {'released', left, 0}
  end
end
local sess = redis.call('HMGET', key, 'ss', 'sm')
end_hold(kind, key, lh, now)
handoff(now, true)
return {'released', 0, 1, sess[1] or '', sess[2] or ''}
