-- Shared by the routelock scripts. One lock lives in three keys with one hash
-- tag, so a script touches one Redis Cluster slot:
--   L  hash   holder token -> hold count, plus '=f' (the hold's fencing token)
--             and '=g' (the attempt id the hold was granted to)
--   Q  zset   waiters, scored by arrival (server clock, microseconds); member
--             "<deadline ms> <ttl ms> <channel> <attempt id> <token>"
--   F  string last fencing token issued for the key; outlives L
local L, Q, F = KEYS[1], KEYS[2], KEYS[3]

-- The server clock in microseconds, as a number and as a decimal string
-- (built by concatenation: string.format costs a microsecond here).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), t[1] .. string.sub('00000' .. t[2], -6)
end

-- A fencing token greater than every earlier one for the key: the larger of
-- the last one issued + 1 and the server clock in microseconds. The clock part
-- keeps the order across an expired F and across a restart that lost F.
local function next_fence(now, nows, retention)
  local f = nows
  local last = redis.call('SET', F, f, 'PX', retention, 'GET')
  if last and tonumber(last) >= now then
    f = string.format('%.0f', tonumber(last) + 1)
    redis.call('SET', F, f, 'PX', retention)
  end
  return f
end

-- Make tok the sole holder, with count 1, and return the new fencing token.
local function take(tok, ttl, now, nows, retention, id)
  local f = next_fence(now, nows, retention)
  redis.call('HSET', L, tok, 1, '=f', f, '=g', id)
  redis.call('PEXPIRE', L, ttl)
  return f
end

-- Hand the free lock to the oldest waiter whose deadline has not passed and
-- tell it on its Locker's channel, unless it is member self, the caller.
-- Returns its member and fencing token, or nil when nobody is left waiting.
local function grant_next(now, nows, retention, self)
  for _ = 1, 64 do
    local e = redis.call('ZPOPMIN', Q)
    if #e == 0 then return nil end
    local dl, ttl, ch, id, tok = string.match(e[1], '^(%d+) (%d+) (%S+) (%S+) (%S+)$')
    if dl and tonumber(dl) * 1000 > now then
      local f = take(tok, ttl, now, nows, retention, id)
      if e[1] ~= self then
        redis.call('PUBLISH', ch, id .. ' ' .. f)
      end
      return e[1], f
    end
  end
  return nil
end
