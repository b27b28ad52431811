-- ARGV: token, ttl ms, fence retention ms, remaining wait ms (0: fail fast),
--       attempt id, waiter member ('' when failing fast)
-- Returns the fencing token (> 0) when acquired or re-entered, and
-- -pttl (<= 0) when held by another owner (and queued when waiting).
local tok, ttl, ret, wait = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local id, member = ARGV[5], ARGV[6]

local h = redis.call('HMGET', L, tok, '=f', '=g')
if h[1] then
  if h[3] == id then
    return tonumber(h[2]) -- granted to this attempt while it waited
  end
  redis.call('HINCRBY', L, tok, 1)
  if redis.call('PTTL', L) < ttl then
    redis.call('PEXPIRE', L, ttl)
  end
  if member ~= '' then
    redis.call('ZREM', Q, member)
  end
  return tonumber(h[2])
end

local now, nows
if not h[2] then
  now, nows = now_us()
  if member == '' or redis.call('EXISTS', Q) == 0 then
    return tonumber(take(tok, ttl, now, nows, ret, id))
  end
  -- The lock is free but others queue for it (their holder expired): the
  -- oldest waiter goes first, which may be this one.
  redis.call('ZADD', Q, 'NX', nows, member)
  local m, f = grant_next(now, nows, ret, member)
  if not m then
    return tonumber(take(tok, ttl, now, nows, ret, id))
  elseif m == member then
    return tonumber(f)
  end
end

local pttl = redis.call('PTTL', L)
if wait > 0 then
  if not nows then
    now, nows = now_us()
  end
  redis.call('ZADD', Q, 'NX', nows, member)
  if redis.call('PTTL', Q) < wait + ttl then
    redis.call('PEXPIRE', Q, wait + ttl)
  end
end
return -math.max(pttl, 0)
