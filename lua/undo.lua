-- undo.lua: end what a request made when its answer did not reach its client
-- (the client left, or the call's outcome stayed unknown), unless somebody was
-- told of it. The gateway runs it only once the request's calls are past their
-- "not after", when no copy of them can run any more, so it needs no
-- tombstone; and it ends only what the request itself made (its maker id, its
-- poll id), so a copy of it run late, or twice, ends nothing anyone knows.
--
-- The request's own hold (ARGV 2) ends unless told (a replay, a re-entry, a
-- renewal handed it out), and the Idempotency-Key record it made is forgotten
-- with it, so that the key's next request is a fresh one (not while its
-- ticket stays queued, 'poll' below: a retry with the key replays it). Its
-- ticket:
--   'drop'  nobody can ever learn the ticket (a fair request without a key):
--           it leaves the queue, and its grant ends unless told;
--   'poll'  its owner knows it, or can learn it with its key: the poll (or the
--           wait) ARGV 6 no longer keeps it alive; a grant handed to that poll
--           forgets it, and a grant left handed to no poll and told to nobody
--           waits for its claim again, for at most the ticket ttl from now (and
--           passes on at once when that is no time at all). A grant another
--           poll was handed keeps its lease: only that poll's own undo could
--           take it back.
--
-- KEYS: 1 the lock (lib.lua)
-- ARGV: 1 what becomes of the ticket: 'drop' | 'poll' | ''
--       2 the request's own lease hash, or ''
--       3 ticket hash, or ''
--       4 the lease hash that ticket is granted under, or ''
--       5 maker: the request's id
--       6 poll id (with 'poll')
--       7 by: the principal of the request
--       8 ticket ttl ms
--       9 Idempotency-Key record hash, or ''
-- Replies:
--   {'undone', what}  what: 'released' (a hold ended), 'cancelled' (a ticket
--                     left the queue), 'unclaimed' (a grant waits for its claim
--                     again), 'passed' (that grant passed on), 'queued' (still
--                     queued, one poll fewer), 'kept' (told, or handed to
--                     another poll), 'none'

-- undo_hold ends the request's own hold (unless told) and forgets its record;
-- with drop, its ticket and that ticket's grant too. Returns what it did and
-- whether the queue or the holds changed.
local function undo_hold(L, now, ARGV, drop)
  local mk, what, ended, told = ARGV[5], 'none', false, false
  local hashes = {ARGV[2]}
  if drop then
    hashes[2] = ARGV[4]
  end
  for _, lh in ipairs(hashes) do
    local kind, h = find(L, lh, now)
    if h and h.mk == mk then
      if h.told == '1' then
        told = true
      else
        end_hold(L, kind, h, now)
        what, ended = 'released', true
      end
    end
  end
  local th = ARGV[3]
  if drop and th ~= '' and redis.call('HGET', tprefix .. th, 'mk') == mk then
    drop_ticket(L, th, tprefix .. th)
    head_ticket(L)
    if what == 'none' then
      what = 'cancelled'
    end
    ended = true
  end
  -- With 'poll' the ticket stays (its owner may learn it with the key): the
  -- key is forgotten only with a hold this undo ended.
  local rkey = iprefix .. ARGV[9]
  local forget = not told and (ARGV[1] ~= 'poll' or what == 'released')
  if ARGV[9] ~= '' and forget and redis.call('HGET', rkey, 'm') == mk then
    redis.call('DEL', rkey)
  end
  return what, ended
end

-- undo_poll takes the poll ARGV 6 out of the ticket, or of the grant made to it.
local function undo_poll(L, now, ARGV)
  local th, pid, by, tt = ARGV[3], ARGV[6], ARGV[7], tonumber(ARGV[8])
  local tkey = tprefix .. th
  if redis.call('EXISTS', tkey) == 1 then
    if redis.call('HGET', tkey, 'by') ~= by then
      return 'none'
    end
    keep_ticket(L, tkey, now, 0, pid)
    return 'queued'
  end
  local kind, h = find(L, ARGV[4], now)
  if not h or h.by ~= by then
    return 'none'
  end
  if h.told == '1' or not has_item(h.pc, pid) then
    return 'kept'
  end
  h.pc = without_item(h.pc, pid)
  if h.pc ~= '' then
    put(L, h, now)
    return 'kept'
  end
  local left = math.min(h.d - now, tt)
  if left <= 0 then
    end_hold(L, kind, h, now)
    handoff(L, now, true)
    return 'passed'
  end
  h.tk, h.d = th, now + left
  put(L, h, now)
  announce(L, now, 'w:' .. str(left)) -- it now ends sooner than waiters were told
  return 'unclaimed'
end

local function undo(KEYS, ARGV)
  local now = now_ms()
  bind(KEYS[1])
  local L = load(now)
  prune(L, now)
  local what, ended = undo_hold(L, now, ARGV, ARGV[1] == 'drop')
  if ended and not L.x then
    handoff(L, now, true)
  end
  if ARGV[1] == 'poll' then
    local w = undo_poll(L, now, ARGV)
    if what == 'none' then
      what = w
    end
  end
  flush(L, now)
  return {'undone', what}
end
