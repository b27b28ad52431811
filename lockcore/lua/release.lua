-- ARGV: token, fence retention ms, attempt id ('' for a plain release),
--       waiter member ('' when none), the caller's Locker channel
-- A plain release drops one count of token's hold and hands the lock to the
-- next waiter when the count reaches zero. With an attempt id it withdraws a
-- waiter that gave up, releasing the hold if it was granted in the meantime.
-- Returns the count left (0: released), -1 not held by token, -2 withdrawn,
-- or {0, attempt id, fencing token} when the lock went to a waiter of the
-- caller's own Locker, which the caller then wakes: nothing is published.
local L, Q, F = KEYS[1], KEYS[2], KEYS[3]
local tok, ret, id, member, mine = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if id ~= '' and member ~= '' and redis.call('ZREM', Q, member) == 1 then
  return -2
end
local v = redis.call('GET', L)
if not v then
  return id == '' and -1 or -2
end
if id == '' and string.sub(v, 1, #tok + 1) == tok .. ' ' then
  -- The short form (count 1, nobody queued) ends with the fence: no space
  -- after the attempt id's.
  local b = string.find(v, ' ', #tok + 2, true)
  if not string.find(v, ' ', b + 1, true) then
    redis.call('DEL', L)
    return 0
  end
end
-- @common
local t, g, f, n, w = parse(v)
if id ~= '' and g ~= id then
  return -2
end
if t ~= tok then
  return -1
end
if n > 1 then
  redis.call('SET', L, hold(t, g, f, n - 1, w), 'KEEPTTL')
  return n - 1
end
if w then
  local m, fence, to = grant_next(now_us(), ret, nil, mine)
  if to then
    return {0, to, fence}
  elseif m then
    return 0
  end
end
redis.call('DEL', L)
return 0
