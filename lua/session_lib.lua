-- session_lib.lua: helpers shared by the session scripts (which also use
-- lib.lua's str and now_ms); loaded with them, as lib.lua is.
--
-- KEYS, the same for every session script (prefix P, session hash S, the
-- SHA-256 of the session id; the {S} hash tag puts both in one slot):
--   KEYS[1]  P:s:{S}    session hash: by (the principal that made it), ttl,
--                       owner, dl (deadline, Redis ms; 0 once ended, -1 once
--                       finished), b (the
--                       creating request's body hash, for its Idempotency-Key);
--                       PEXPIRE = its deadline, plus GRACE_MS when it
--                       was made with an Idempotency-Key, so that a retry of its
--                       creation after it ended is told so
--   KEYS[2]  P:s:{S}:h  its members, a hash: '<nonce>:<lock name>' -> the time
--                       (Redis ms) until which the member is pending: its acquire
--                       may still be waiting, so a member found without a hold is
--                       forgotten only after that. The hold's (or its ticket's)
--                       id is derived from the session id and the nonce, so Redis
--                       never holds one. PEXPIRE = the session's deadline.
-- A session lives while Redis time <= dl; an ended one has dl 0 and keeps its
-- members until its holds are released (session_finish.lua), so that a DELETE
-- cut short can be sent again; a finished one kept for the grace has dl -1.
local sess, members

-- bind_session points the helpers at the session of KEYS.
local function bind_session(k)
  sess, members = k[1], k[2]
end

-- grace is how long the session key outlives the session: the Idempotency-Key
-- grace when it was made with a key, else nothing.
local function grace()
  if (redis.call('HGET', sess, 'b') or '') ~= '' then
    return GRACE_MS
  end
  return 0
end

-- alive reports whether the session lives and belongs to by.
local function alive(now, by)
  local s = redis.call('HMGET', sess, 'by', 'dl')
  return s[1] == by and (tonumber(s[2]) or 0) >= now
end

-- session_reply: {code, ttl, remaining ms, now, owner, members...}.
local function session_reply(code, now)
  local s = redis.call('HMGET', sess, 'ttl', 'dl', 'owner')
  local out = {code, tonumber(s[1]), math.max(tonumber(s[2]) - now, 0), str(now), s[3]}
  for _, m in ipairs(redis.call('HKEYS', members)) do
    out[#out + 1] = m
  end
  return out
end

-- End of session_lib.lua.
