-- release.lua: release one hold (or all of its count); when a hold ends, hand
-- the lock in the same step to the head live tickets that now fit (or announce
-- it: 'r' when nobody is queued, 'c' otherwise).
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: 1 not after: Redis ms past which this call changes nothing
--       2 lease hash
--       3 by: the principal releasing
--       4 '1': release the whole count at once; '0': one hold
-- Replies:
--   {'released', holds left, 1 if the hold ended else 0, its session's hash
--    and member there ('' for none: the gateway takes the member out of the
--    session)}
--   {'not_held'}
--   {'expired'}     it ran after ARGV 1: nothing done

local function release_hold(L, now, ARGV)
  local kind, h = find(L, ARGV[2], now)
  if not h or h.by ~= ARGV[3] then
    return {'not_held'}
  end
  if ARGV[4] ~= '1' and h.c > 1 then
    h.c = h.c - 1
    h.told, h.pc, h.tk = '1', '', '' -- its owner has it
    put(L, h, now)
    return {'released', h.c, 0}
  end
  end_hold(L, kind, h, now)
  handoff(L, now, true)
  return {'released', 0, 1, h.ss, h.sm}
end

local function release(KEYS, ARGV)
  local now = now_ms()
  if expired(now, ARGV[1]) then
    return {'expired'}
  end
  bind(KEYS[1])
  local L = load(now)
  prune(L, now)
  local reply = release_hold(L, now, ARGV)
  flush(L, now)
  return reply
end
