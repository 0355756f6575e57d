-- session_create.lua: create a session, or replay the one an Idempotency-Key
-- created (its id is derived from the key, so a retry lands here again).
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 by, 2 ttl ms, 3 owner, 4 body hash ('' without an Idempotency-Key),
--       5 request nonce: the same for every attempt of one request, so that an
--         attempt sent again after a broken connection is not a replay
-- Replies:
--   {'created', ttl, remaining, now, owner}
--   {'replayed', ttl, remaining, now, owner, members...}
--   {'idem_used'}       it was created and has ended
--   {'idem_mismatch'}   the key was used with another body

local function session_create(KEYS, ARGV)
  bind_session(KEYS)
  local now = now_ms()
  local by, ttl, body = ARGV[1], tonumber(ARGV[2]), ARGV[4]
  if redis.call('EXISTS', sess) == 1 then
    if redis.call('HGET', sess, 'b') ~= body or redis.call('HGET', sess, 'by') ~= by then
      return {'idem_mismatch'}
    end
    if alive(now, by) then
      if redis.call('HGET', sess, 'n') == ARGV[5] then
        return session_reply('created', now)
      end
      return session_reply('replayed', now)
    end
    return {'idem_used'}
  end
  redis.call('HSET', sess, 'by', by, 'ttl', ttl, 'owner', ARGV[3], 'dl', str(now + ttl), 'b', body, 'n', ARGV[5])
  redis.call('PEXPIRE', sess, ttl + grace())
  return session_reply('created', now)
end
