-- Shared by the acquire and release scripts, which put it after their fast
-- paths ("-- @common"): Lua makes the closures below on every run, so the
-- common case runs before them. One lock lives in three keys with one hash
-- tag, so a script touches one Redis Cluster slot:
--   L  string  the hold, "<token> <attempt id> <fence>", or, when the count
--              is above 1 or waiters may be queued, "... <count> <w>" with
--              w = 1 when they may. The short form is the usual one: taking
--              it is one SET NX and releasing it one GET and one DEL.
--   Q  zset    waiters, scored by arrival (server clock, microseconds); member
--              "<deadline ms> <ttl ms> <channel> <attempt id> <token>"
--   F  string  the fencing counter, seeded from the server clock
-- The server clock in microseconds, as a number and as a decimal string
-- (built by concatenation: Lua prints numbers with 14 digits).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), t[1] .. string.sub('00000' .. t[2], -6)
end

-- Seeds the fencing counter F, just found missing (INCR gave 1), with the
-- server clock in microseconds, and returns it as a number and a string.
-- F is missing for a new key, after its retention ran out and after a
-- restart that lost it. Tokens stay increasing across a re-seed because F
-- grows by at most one per script run, and no Redis runs a script per
-- microsecond: the clock has moved on further than the counter since the
-- last seed.
local function seed_fence(retention)
  local now, nows = now_us()
  redis.call('SET', F, nows, 'PX', retention)
  return now, nows
end

-- The next fencing token, as a number and a decimal string: one INCR of F.
local function next_fence(retention)
  local f = redis.call('INCR', F)
  if f > 1 then
    return f, string.format('%.0f', f)
  end
  return seed_fence(retention)
end

-- The value of a hold; w: waiters may be queued.
local function hold(tok, id, f, n, w)
  if n == 1 and not w then
    return tok .. ' ' .. id .. ' ' .. f
  end
  return tok .. ' ' .. id .. ' ' .. f .. ' ' .. n .. (w and ' 1' or ' 0')
end

-- The fields of hold v: token, attempt id, fence (string), count, waiters.
local function parse(v)
  local tok, id, f, rest = string.match(v, '^(%S+) (%S+) (%d+)(.*)$')
  if rest == '' then
    return tok, id, f, 1, false
  end
  local n, w = string.match(rest, '^ (%d+) (%d)$')
  return tok, id, f, tonumber(n), w == '1'
end

-- Make tok the sole holder for attempt id, with count 1, and return the new
-- fencing token.
local function take(tok, ttl, id, retention, w)
  local f, fs = next_fence(retention)
  redis.call('SET', L, hold(tok, id, fs, 1, w), 'PX', ttl)
  return f
end

-- Hand the free lock to the oldest waiter whose deadline has not passed and
-- tell it on its Locker's channel, unless it is member self, the caller, or
-- its channel is mine, the caller's Locker's, which then wakes it itself.
-- Returns its member and fencing token, and its attempt id when its channel
-- is mine; nil when nobody is left waiting.
local function grant_next(now, retention, self, mine)
  for _ = 1, 64 do
    local e = redis.call('ZPOPMIN', Q)
    if #e == 0 then return nil end
    local dl, ttl, ch, id, tok = string.match(e[1], '^(%d+) (%d+) (%S+) (%S+) (%S+)$')
    if dl and tonumber(dl) * 1000 > now then
      local f = take(tok, ttl, id, retention, redis.call('EXISTS', Q) == 1)
      if ch == mine then
        return e[1], f, id
      elseif e[1] ~= self then
        redis.call('PUBLISH', ch, id .. ' ' .. string.format('%.0f', f))
      end
      return e[1], f
    end
  end
  return nil
end
