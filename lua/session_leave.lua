-- session_leave.lua: remove members: holds released one by one ('now'), or
-- members found without a hold or ticket ('pruned': only those no longer
-- pending, whose acquire cannot still be running).
--
-- KEYS: 1 session, 2 members (see session_lib.lua)
-- ARGV: 1 'now' | 'pruned', then members
-- Replies: {'left', how many}

local function session_leave(KEYS, ARGV)
  bind_session(KEYS)
  local now = now_ms()
  local n = 0
  for i = 2, #ARGV do
    local until_ms = tonumber(redis.call('HGET', members, ARGV[i]) or '')
    if until_ms and (ARGV[1] == 'now' or until_ms < now) then
      n = n + redis.call('HDEL', members, ARGV[i])
    end
  end
  return {'left', n}
end
