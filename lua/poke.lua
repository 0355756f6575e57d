-- poke.lua: called by a waiting gateway when a hold's lease, or the head
-- ticket, should have run out. Expiry runs no script, so this is what hands an
-- expired lock (or a slot of a shared one, or the place of a dead head ticket)
-- on, and announces it. It only applies what time has already done, so a copy
-- of it run late is harmless: it takes no "not after".
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: none
-- Replies:
--   {'held', wake}   something still holds or waits: look again in wake ms
--   {'free'}         no holds and no queue left

local function poke(KEYS, ARGV)
  local now = now_ms()
  bind(KEYS[1])
  derive()
  local L = load(now)
  prune(L, now)
  head_ticket(L)
  if not L.x then
    handoff(L, now, true)
  end
  local reply = {'free'}
  if L.x or L.n > 0 or L.q then
    reply = {'held', wake_ms(L, now)}
  end
  flush(L, now)
  return reply
end
