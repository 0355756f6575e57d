-- session_holds.lua: act on a session's holds and tickets in one lock: renew
-- them with the session, end them with it, or look at them.
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: 1 not after: Redis ms past which this call changes nothing
--       2 op: 'renew' | 'end' | 'look'
--       3 by: the principal the session belongs to
--       4 ttl ms (op 'renew': the session's new ttl)
--       then per member three hashes: the lease hash of a hold asked for in the
--       session, the hash of its ticket, and the lease hash of that ticket's grant
-- Replies:
--   {'holds', then per member: state, fence, count, shared 0/1}
--   state: 'held' (under its own lease), 'held_ticket' (its ticket's grant),
--   'queued' (its ticket waits), 'gone'; with op 'end', what was there before
--   {'expired'}     it ran after ARGV 1: nothing done

local function session_member(L, now, op, by, ttl, lh, th, tlh)
  local state = 'held'
  local kind, h = find(L, lh, now)
  if not h then
    state = 'held_ticket'
    kind, h = find(L, tlh, now)
  end
  if h and h.by ~= by then
    h = nil
  end
  local tkey = tprefix .. th
  local queued = not h and redis.call('EXISTS', tkey) == 1 and redis.call('HGET', tkey, 'by') == by
  local out = {'gone', '0', 0, 0}
  if h then
    out = {state, h.f, h.c, 0}
    if h.shared then
      out[4] = 1
    end
  elseif queued then
    out[1] = 'queued'
  end
  if op == 'look' and h then
    hand_out(L, h, now, true, '') -- its owner is shown its lease: never undone now
  elseif op == 'end' then -- the reply still says what was there: what this ended
    if h then
      end_hold(L, kind, h, now)
      return out, true
    elseif queued then
      drop_ticket(L, th, tkey)
      return out, true -- the queue moved: its new head may fit now
    end
  elseif op == 'renew' then
    if h then
      local before = h.d
      h.ttl, h.tk, h.sd = ttl, '', str(now + ttl)
      set_deadline(L, h, ttl, now)
      if h.d < before then
        announce(L, now, 'w:' .. str(h.d - now)) -- it now ends sooner than waiters were told
      end
    elseif queued then
      redis.call('HSET', tkey, 'sd', str(now + ttl), 'ttl', ttl)
    end
  end
  return out, false
end

local function session_holds(KEYS, ARGV)
  local now = now_ms()
  if expired(now, ARGV[1]) then
    return {'expired'}
  end
  bind(KEYS[1])
  derive()
  local L = load(now)
  settle(L, now)
  local op, by, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
  local reply, ended = {'holds'}, false
  for i = 5, #ARGV, 3 do
    local out, e = session_member(L, now, op, by, ttl, ARGV[i], ARGV[i + 1], ARGV[i + 2])
    for _, v in ipairs(out) do
      reply[#reply + 1] = v
    end
    ended = ended or e
  end
  if ended then
    head_ticket(L)
    if not L.x then
      handoff(L, now, true)
    end
  end
  flush(L, now)
  return reply
end
