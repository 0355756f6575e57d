-- force.lua: end every hold of a lock, whoever holds it, and hand it to the head
-- live tickets.
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: 1 not after: Redis ms past which this call changes nothing
-- Replies:
--   {'forced', holds removed}
--   {'expired'}     it ran after ARGV 1: nothing done

local function force(KEYS, ARGV)
  local now = now_ms()
  if expired(now, ARGV[1]) then
    return {'expired'}
  end
  bind(KEYS[1])
  derive()
  local L = load(now)
  prune(L, now)
  local n = 0
  if L.x then
    end_hold(L, 'x', L.x, now)
    n = 1
  end
  if L.n > 0 then
    for _, lh in ipairs(redis.call('ZRANGE', shset, 0, -1)) do
      local h = get_shared(L, lh, now)
      if h then
        end_hold(L, 's', h, now)
        n = n + 1
      end
    end
  end
  if n > 0 then
    handoff(L, now, true)
  else
    settle(L, now)
  end
  flush(L, now)
  return {'forced', n}
end
