-- undo.lua: end what a request made when its answer did not reach its client
-- (the client left, or the call's outcome stayed unknown), unless somebody was
-- told of it. The gateway runs it only once the request's calls are past their
-- "not after", when no copy of them can run any more, so it needs no
-- tombstone; and it ends only what the request itself made (its maker id, its
-- poll id), so a copy of it run late, or twice, ends nothing anyone knows.
--
-- The request's answer is taken out of the hold it made, or was handed (a
-- replay): a hold ends once its maker's answer and every other answer it was
-- handed to failed, unless it was proven told (a re-entry, a renewal, a
-- session's look); then the Idempotency-Key record that named it is
-- forgotten, so that the key's next request is a fresh one. Its ticket:
--   'drop'  nobody can ever learn the ticket (a fair request without a key):
--           it leaves the queue, and its grant ends as the hold does;
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
--       6 poll id: the request's own wait ('drop', 'poll')
--       7 by: the principal of the request
--       8 ticket ttl ms
--       9 Idempotency-Key record hash, or ''
-- Replies:
--   {'undone', what}  what: 'released' (a hold ended), 'cancelled' (a ticket
--                     left the queue), 'unclaimed' (a grant waits for its claim
--                     again), 'passed' (that grant passed on), 'queued' (still
--                     queued, one poll fewer), 'kept' (told, or handed to
--                     another answer still out), 'none'

-- undo_one takes the answer of request mk (its maker's, or one it was handed
-- to) out of hold h (and the request's own poll skip, from a grant to its
-- ticket), and ends the hold when no
-- answer that had it is left: its maker's failed (told 'f', or mk is its
-- maker) and no other answer it was handed to is outstanding. A hold told for
-- proven is kept. Returns whether it ended the hold.
local function undo_one(L, now, kind, h, mk, skip)
  if h.told == '1' then
    return false
  end
  if skip ~= '' then -- the request's own poll, in the list of a grant to its ticket
    h.pc = without_item(h.pc, skip)
  end
  local maker = h.mk == mk
  if not maker and not has_item(h.pc, mk) then
    return false -- neither made by this request nor handed to it
  end
  h.pc = without_item(h.pc, mk)
  if maker then
    h.told = 'f'
  end
  if h.told == 'f' and h.pc == '' then
    end_hold(L, kind, h, now)
    return true
  end
  put(L, h, now)
  return false
end

-- undo_hold takes the request's answer out of its own hold (and, with drop,
-- of its ticket's grant, and drops its ticket), ending what nobody has; and
-- forgets the Idempotency-Key record of a hold it ended. Returns what it did
-- and whether the queue or the holds changed.
local function undo_hold(L, now, ARGV, drop)
  local mk, what, ended = ARGV[5], 'none', false
  local hashes, skips = {ARGV[2]}, {''}
  if drop then
    hashes[2], skips[2] = ARGV[4], ARGV[6]
  end
  for i, lh in ipairs(hashes) do
    local kind, h = find(L, lh, now)
    if h and undo_one(L, now, kind, h, mk, skips[i]) then
      what, ended = 'released', true
      local rkey = iprefix .. ARGV[9]
      if ARGV[9] ~= '' and redis.call('HGET', rkey, 'h') == lh then
        redis.call('DEL', rkey) -- ended because nobody was told of it: a retry with the key is a fresh request
      end
    elseif h and what == 'none' then
      what = 'kept'
    end
  end
  local th = ARGV[3]
  if drop and th ~= '' and redis.call('HGET', tprefix .. th, 'mk') == mk then
    drop_ticket(L, th, tprefix .. th)
    head_ticket(L)
    if ARGV[9] ~= '' and redis.call('HGET', iprefix .. ARGV[9], 'm') == mk then
      redis.call('DEL', iprefix .. ARGV[9])
    end
    if what == 'none' or what == 'kept' then
      what = 'cancelled'
    end
    ended = true
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
  if h.pc ~= '' then -- another answer had it too
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
  derive()
  local L = load(now)
  prune(L, now)
  local what, ended = undo_hold(L, now, ARGV, ARGV[1] == 'drop')
  if ended and not L.x then
    handoff(L, now, true)
  end
  if ARGV[1] == 'poll' then
    local w = undo_poll(L, now, ARGV)
    if what == 'none' or what == 'kept' then
      what = w
    end
  end
  flush(L, now)
  return {'undone', what}
end
