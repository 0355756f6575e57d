-- session_join.lua: add a member (a hold about to be asked for, or a ticket)
-- before the lock's own script runs. It stays pending (not forgotten for lack of
-- a hold) for pending ms: the longest its acquire may take.
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 by, 2 member, 3 pending ms
-- Replies:
--   {'joined', remaining ms}
--   {'gone'}

local function session_join(KEYS, ARGV)
  bind_session(KEYS)
  local now = now_ms()
  if not alive(now, ARGV[1]) then
    return {'gone'}
  end
  local remaining = tonumber(redis.call('HGET', sess, 'dl')) - now
  local pending = now + tonumber(ARGV[3])
  local was = tonumber(redis.call('HGET', members, ARGV[2]) or '0')
  redis.call('HSET', members, ARGV[2], str(math.max(pending, was)))
  redis.call('PEXPIRE', members, math.max(remaining, 1))
  return {'joined', remaining}
end
