-- state.lua: the lock's state, or one lease's. Hands an expired lock to the
-- head live tickets first, so nobody ever observes a free lock ahead of a live
-- queue. It only applies what time has already done: it takes no "not after".
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: 1 lease hash, or '' for the lock's state
--       2 by: the principal asking (lease only)
--       3 watch ms: how long the caller will wait for news of the lock ('0': none)
-- Replies:
--   {'held', fence, count, pttl, at, owner, ttl, now, shared, limit}   ARGV 1 given and held
--   {'not_held'}                                                       ARGV 1 given, not held
--   {'state', mode, limit, waiters, now, last fence, holders,          ARGV 1 empty; mode is
--    top fence, top count, top owner, longest pttl,                     'free', 'x' or 's'; the
--    then per hold (at most MAX_LISTED): fence, count, pttl, owner, shared}   top hold has the highest fence

local STATE_MAX_LISTED = 100

local function state_of(L, now)
  local mode, limit, holds, sh = 'free', '', {}, 0
  if L.x then
    mode, holds = 'x', {L.x}
  elseif L.n > 0 then
    for _, lh in ipairs(redis.call('ZRANGE', shset, 0, -1)) do
      local h = get_shared(L, lh, now)
      if h then
        holds[#holds + 1] = h
      end
    end
    if #holds > 0 then
      mode, limit, sh = 's', L.l, 1
    end
  end
  local out = {'state', mode, limit, waiters(L), str(now), str(L.f), #holds}
  local top, longest = nil, 0
  for _, h in ipairs(holds) do
    if not top or tonumber(h.f) > tonumber(top.f) then
      top = h
    end
    longest = math.max(longest, h.d - now)
  end
  if top then
    out[#out + 1] = top.f
    out[#out + 1] = top.c
    out[#out + 1] = top.owner
  else
    out[#out + 1] = '0'
    out[#out + 1] = 0
    out[#out + 1] = ''
  end
  out[#out + 1] = longest
  for i, h in ipairs(holds) do
    if i > STATE_MAX_LISTED then
      break
    end
    out[#out + 1] = h.f
    out[#out + 1] = h.c
    out[#out + 1] = math.max(h.d - now, 0)
    out[#out + 1] = h.owner
    out[#out + 1] = sh
  end
  return out
end

local function state(KEYS, ARGV)
  local now = now_ms()
  bind(KEYS[1])
  derive()
  local L = load(now)
  settle(L, now)
  local reply
  if ARGV[1] ~= '' then
    local _, h = find(L, ARGV[1], now)
    if h and h.by == ARGV[2] then
      reply = hold_reply('held', now, h)
    else
      reply = {'not_held'}
    end
  else
    reply = state_of(L, now)
    local watch = tonumber(ARGV[3])
    if watch > 0 and reply[7] > 0 then
      interest(L, now, watch)
    end
  end
  flush(L, now)
  return reply
end
