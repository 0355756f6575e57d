-- session_holds.lua: act on a session's holds and tickets in one lock: renew
-- them with the session, end them with it, or look at them.
--
-- KEYS: 1 lock, 2 fence, 3 queue (see lib.lua)
-- ARGV: 1 op: 'renew' | 'end' | 'look'
--       2 by: the principal the session belongs to
--       3 ttl ms (op 'renew': the session's new ttl)
--       then per member three hashes: the lease hash of a hold asked for in the
--       session, the hash of its ticket, and the lease hash of that ticket's grant
-- Replies:
--   {'holds', then per member: state, fence, count, shared 0/1}
--   state: 'held' (under its own lease), 'held_ticket' (its ticket's grant),
--   'queued' (its ticket waits), 'gone'; with op 'end', what was there before
local now = now_ms()
local op, by, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
settle(now)
local out, ended = {'holds'}, false
for i = 4, #ARGV, 3 do
  local lh, th, tlh = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local state, hold = 'held', lh
  local hk, key = find_hold(lh)
  if not hk then
    state, hold = 'held_ticket', tlh
    hk, key = find_hold(tlh)
  end
  if hk and redis.call('HGET', key, 'by') ~= by then
    hk = nil
  end
  local tkey = tprefix .. th
  local queued = not hk and redis.call('EXISTS', tkey) == 1 and redis.call('HGET', tkey, 'by') == by
  local h = {'0', '0'}
  if hk then
    h = redis.call('HMGET', key, 'fence', 'count')
  end
  if op == 'end' then -- the reply still says what was there: what this ended
    if hk then
      end_hold(hk, key, hold, now)
      ended = true
    elseif queued then
      drop_ticket(th, tkey)
      ended = true -- the queue moved: its new head may fit now
    end
  elseif op == 'renew' then
    if hk then
      redis.call('HSET', key, 'ttl', ttl, 'tk', '', 'sd', str(now + ttl))
      set_deadline(hk, key, hold, ttl, now)
    elseif queued then
      redis.call('HSET', tkey, 'sd', str(now + ttl), 'ttl', ttl)
    end
  end
  if hk then
    local sh = 0
    if hk == 's' then
      sh = 1
    end
    out[#out + 1] = state
    out[#out + 1] = h[1]
    out[#out + 1] = tonumber(h[2])
    out[#out + 1] = sh
  else
    if queued then
      out[#out + 1] = 'queued'
    else
      out[#out + 1] = 'gone'
    end
    out[#out + 1] = '0'
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
end
if ended and redis.call('EXISTS', lock) == 0 then
  handoff(now, true)
end
return out
