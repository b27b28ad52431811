-- ARGV: token, fence retention ms, attempt id ('' for a plain release),
--       waiter member ('' when none)
-- A plain release drops one count of token's hold and hands the lock to the
-- next waiter when the count reaches zero. With an attempt id it withdraws a
-- waiter that gave up, releasing the hold if it was granted in the meantime.
-- Returns the count left (0: released), -1 not held by token, -2 withdrawn.
local tok, ret, id, member = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if id ~= '' then
  if member ~= '' and redis.call('ZREM', Q, member) == 1 then
    return -2
  end
  if redis.call('HGET', L, '=g') ~= id then
    return -2
  end
end
local n = redis.call('HGET', L, tok)
if not n then
  return -1
end
n = tonumber(n) - 1
if n > 0 then
  redis.call('HSET', L, tok, n)
  return n
end
redis.call('DEL', L)
if redis.call('EXISTS', Q) == 1 then
  local now, nows = now_us()
  grant_next(now, nows, ret)
end
return 0
