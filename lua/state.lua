-- state.lua: the lock's state, or one lease's. Hands an expired lock to the head
-- live tickets first, so nobody ever observes a free lock ahead of a live queue.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: 1 lease hash, or '' for the lock's state
--       2 by: the principal asking (lease only)
-- Replies:
--   {'held', fence, count, pttl, at, owner, ttl, now, shared, limit}   ARGV[1] given and held
--   {'not_held'}                                                       ARGV[1] given, not held
--   {'state', mode, limit, waiters, now, last fence, holders,          ARGV[1] empty; mode is
--    top fence, top count, top owner, longest pttl,                     'free', 'x' or 's'; the
--    then per hold (at most MAX_LISTED): fence, count, pttl, owner, shared}   top hold has the highest fence
local MAX_LISTED = 100
local now = now_ms()
settle(now)
if ARGV[1] ~= '' then
  local kind, key = find_hold(ARGV[1])
  if not kind or redis.call('HGET', key, 'by') ~= ARGV[2] then
    return {'not_held'}
  end
  return hold_reply('held', now, kind, key)
end

local mode, limit = 'free', ''
local keys, sh = {}, 0
if redis.call('EXISTS', lock) == 1 then
  mode, keys = 'x', {lock}
else
  for _, lh in ipairs(redis.call('ZRANGE', shkey, 0, -1)) do
    keys[#keys + 1] = sprefix .. lh
  end
  if #keys > 0 then
    mode, limit, sh = 's', redis.call('GET', slkey) or '0', 1
  end
end
local out = {'state', mode, limit, waiters(), str(now), redis.call('GET', fencekey) or '0', #keys}
local top, topf, longest = nil, -1, 0
local listed = {}
for i, key in ipairs(keys) do
  local h = redis.call('HMGET', key, 'fence', 'count', 'owner')
  local pttl = redis.call('PTTL', key)
  local f = tonumber(h[1])
  if f > topf then
    top, topf = h, f
  end
  longest = math.max(longest, pttl)
  if i <= MAX_LISTED then
    listed[#listed + 1] = {h[1], tonumber(h[2]), pttl, h[3], sh}
  end
end
if top then
  out[#out + 1] = top[1]
  out[#out + 1] = tonumber(top[2])
  out[#out + 1] = top[3]
else
  out[#out + 1] = '0'
  out[#out + 1] = 0
  out[#out + 1] = ''
end
out[#out + 1] = longest
for _, h in ipairs(listed) do
  for _, v in ipairs(h) do
    out[#out + 1] = v
  end
end
return out
