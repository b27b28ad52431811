-- Shared by the acquire and release scripts, which put it after their fast
-- paths ("-- @common"): Lua makes the closures below on every run, so the
-- common case runs before them. One lock lives in three keys with one hash
-- tag, so a script touches one Redis Cluster slot:
--   L  string  the hold (see hold.lua)
--   Q  zset    waiters, scored by arrival (server clock, microseconds); member
--              "<deadline ms> <ttl ms> <channel> <attempt id> <token>"
--   F  string  the last fencing token (see next_fence)
--   R  string  the revoked entries (see hold.lua), which live as long as
--              the revoked hold would have; only revoke writes it
--   A  stream  the audit records of revocations; only revoke writes it
-- The server clock in microseconds, as a number and as a decimal string
-- (built by concatenation: Lua prints numbers with 14 digits).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), t[1] .. string.sub('00000' .. t[2], -6)
end

-- The next fencing token of the lock, as a number and a decimal string:
-- the server clock in microseconds, or one more than the last token (F)
-- when that is greater (more than one token in a microsecond, or a clock
-- stepped back). The clock keeps tokens increasing where a counter alone
-- would not: a replica promoted by a failover may have missed the old
-- master's last tokens, but not the time that passed since it issued
-- them. The acquire script's fast path does the same inline.
local function next_fence(retention)
  local f, fs = now_us()
  local last = tonumber(redis.call('SET', F, fs, 'PX', retention, 'GET'))
  if last and last >= f then
    f = last + 1
    fs = string.format('%.0f', f)
    redis.call('SET', F, fs, 'PX', retention)
  end
  return f, fs
end

-- Make tok the sole holder for attempt id for ttl ms, taken at since (the
-- server clock in microseconds, a decimal string), with waiters flag w,
-- and return the new fencing token as a number and a string.
local function take(tok, ttl, id, since, retention, w)
  local f, fs = next_fence(retention)
  redis.call('SET', L, hold_make(tok, fs, since, w, id), 'PX', ttl)
  return f, fs
end

-- Hand the free lock to the oldest waiter whose deadline has not passed.
-- The caller itself (member self) gets its whole lease. Any other waiter
-- gets the lock for claim ms and claims it within that window (a renewal,
-- or its next acquire call, extends it) or loses it when the window ends,
-- so that a waiter that vanished, or returned without its withdrawal
-- reaching Redis, delays the next one by one window at most. A waiter of
-- the caller's Locker (channel mine) is woken by the caller; another is
-- told on its Locker's channel (on a Cluster, its shard channel of the
-- lock's slot). When
-- trust is set (one Redis server: PUBLISH counts every subscriber), a
-- waiter whose channel nobody reads, because its process is gone, is
-- skipped at once. Each entry is popped once, whatever its fate, so the
-- loop costs one pop per queued entry over the queue's life.
-- now is the server clock in microseconds, as a number and as nows, a
-- decimal string (now_us).
-- Returns the member and fencing token of the new holder, and its attempt
-- id when the caller is to wake it; nil when nobody is left waiting.
local function grant_next(now, nows, retention, self, mine, claim, trust)
  while true do
    local e = redis.call('ZPOPMIN', Q)
    if #e == 0 then
      return nil
    end
    local dl, ttl, ch, id, tok = string.match(e[1], '^(%d+) (%d+) (%S+) (%S+) (%S+)$')
    if dl and tonumber(dl) * 1000 > now then
      local more = redis.call('EXISTS', Q) == 1
      if e[1] == self then
        return e[1], (take(tok, ttl, id, nows, retention, more))
      end
      local px = math.min(claim, tonumber(ttl))
      local f, fs = take(tok, px, id, nows, retention, more)
      if ch == mine then
        return e[1], f, id
      end
      -- A shard channel (a Cluster's: "<channel>{<slot tag>}") is told
      -- with SPUBLISH, on the lock's shard only. When that reaches nobody
      -- here (the Engine's subscription is not in place yet, or is on a
      -- replica, or the server has no sharded pub/sub), the Engine's own
      -- channel is told too, with PUBLISH, which reaches every node.
      local msg, n = id .. ' ' .. fs .. ' ' .. px
      if string.find(ch, '{', 1, true) then
        n = redis.pcall('SPUBLISH', ch, msg)
        if type(n) ~= 'number' or n == 0 then
          n = redis.call('PUBLISH', string.match(ch, '^[^{]*'), msg)
        end
      else
        n = redis.call('PUBLISH', ch, msg)
      end
      if n > 0 or not trust then
        return e[1], f
      end
    end
  end
end
