-- Shared by the acquire and release scripts, which put it after their fast
-- paths ("-- @common"): Lua makes the closures below on every run, so the
-- common case runs before them. One lock lives in keys with one hash tag,
-- so a script touches one Redis Cluster slot:
--   L  string  the hold (see hold.lua), or '~' while shared holds hold it
--              (S and P below)
--   Q  zset    waiters, scored by arrival (server clock, microseconds); member
--              "<deadline ms> <ttl ms> <channel> <attempt id> <token>", and
--              " <share>" after it for a shared acquisition (Policy.Share)
--   F  string  the last fencing token, and whether waiters may be queued
--              (see fence_next and fence_read in hold.lua)
--   R  string  the revoked entries (see hold.lua), which live as long as
--              the revoked hold would have; only revoke writes it
--   A  stream  the audit records of revocations; only revoke writes it
-- The server clock in microseconds, as a number and as a decimal string
-- (built by concatenation: Lua prints numbers with 14 digits).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), t[1] .. string.sub('00000' .. t[2], -6)
end

-- Draws the next fencing token of the lock and keeps it (see fence_next
-- in hold.lua), reserving reserve tokens above it; returns it as a number
-- and a decimal string.
local function next_fence(retention, reserve)
  local f, fs, top, c = fence_next(fence_read(redis.call('GET', F)), reserve)
  fence_keep(F, top, c, retention)
  return f, fs
end

-- Make tok the sole holder for attempt id for ttl ms, taken at since (the
-- server clock in microseconds, a decimal string), with waiters flag w;
-- returns the fencing token drawn for it, as a number and a string, the
-- top of its reservation and the clock's token, which the caller keeps
-- (fence_keep) once the hold is handed out.
local function take(tok, ttl, id, since, w)
  local f, fs, top, c = fence_next(fence_read(redis.call('GET', F)), FENCE_RESERVE)
  redis.call('SET', L, hold_make(tok, fs, since, w, id), 'PX', ttl)
  return f, fs, top, c
end

-- The shared holds of the lock (Policy.Share). While any is held, L is the
-- marker '~' (no hold parses as it), and
--   S  zset  their entries (attempt ids), scored by when each one's lease
--            ends (server clock, ms)
--   P  hash  entry -> "<share> <slot> <fence> <since> <token>": the
--            Policy's Share (-1: any number of holders), the slot among the
--            permits (-1: none), the fencing token, when it was taken (server
--            clock, us), the owner token. A re-entry under a propagated
--            token copies its hold's fields: it is no new holder.
-- L, S and P expire together, when the last entry's lease ends.

-- Drops the shared entries whose lease ended by now_ms.
local function shared_purge(now_ms)
  local gone = redis.call('ZRANGEBYSCORE', S, '-inf', now_ms)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', S, '-inf', now_ms)
    for i = 1, #gone, 1000 do -- unpack takes a few thousand values at most
      redis.call('HDEL', P, unpack(gone, i, math.min(i + 999, #gone)))
    end
  end
end

-- After a purge: how many owners (distinct tokens) hold the lock shared,
-- the lowest slot none of them has, and the entry and fields of a hold
-- owned by one of toks (space-separated tokens; nil: none looked for).
local function shared_scan(toks, now_ms)
  shared_purge(now_ms)
  local kv = redis.call('HGETALL', P)
  local owners, n, used, found, fv = {}, 0, {}, nil, nil
  for i = 1, #kv, 2 do
    local _, slot, _, _, t = string.match(kv[i + 1], '^(%S+) (%S+) (%S+) (%S+) (%S+)$')
    if t then
      if not owners[t] then
        owners[t] = true
        n = n + 1
      end
      used[tonumber(slot)] = true
      if toks and not found and hold_has(toks, t) then
        found, fv = kv[i], kv[i + 1]
      end
    end
  end
  local free = 0
  while used[free] do
    free = free + 1
  end
  return n, free, found, fv
end

-- Makes L, S and P last px ms, L being the marker.
local function shared_expire(px)
  redis.call('SET', L, '~', 'PX', px)
  redis.call('PEXPIRE', S, px)
  redis.call('PEXPIRE', P, px)
end

-- Makes L, S and P end with the last entry's lease, or deletes them when
-- no entry is left; returns the number of entries left.
local function shared_settle(now_ms)
  local last = redis.call('ZRANGE', S, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', L, S, P)
    return 0
  end
  shared_expire(math.max(tonumber(last[2]) - now_ms, 1))
  return redis.call('ZCARD', S)
end

-- Adds shared entry id with fields v, its lease ending ttl ms after now_ms.
-- L must be free or the marker.
local function shared_add(id, v, ttl, now_ms)
  redis.call('ZADD', S, now_ms + ttl, id)
  redis.call('HSET', P, id, v)
  shared_expire(math.max(redis.call('PTTL', L), ttl))
end

-- Makes entry id of token tok a fresh shared hold with Policy Share share
-- (a decimal string) in slot slot for ttl ms, taken at since (a decimal
-- string, us); returns its fencing token as a number and a string, the top
-- of its reservation (none: a shared hold is not handed over in memory)
-- and the clock's token, which the caller keeps (fence_keep) once the hold
-- is handed out.
local function shared_take(tok, share, slot, id, ttl, since, now_ms)
  local f, fs, top, c = fence_next(fence_read(redis.call('GET', F)), 0)
  shared_add(id, share .. ' ' .. slot .. ' ' .. fs .. ' ' .. since .. ' ' .. tok, ttl, now_ms)
  return f, fs, top, c
end

-- How long until a shared acquisition that does not get in may: until the
-- first live shared entry's lease ends, or the exclusive hold's.
local function shared_wait(now_ms)
  local first = redis.call('ZRANGEBYSCORE', S, '(' .. now_ms, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #first > 0 then
    return math.max(tonumber(first[2]) - now_ms, 0)
  end
  return math.max(redis.call('PTTL', L), 0)
end

-- A parked waiter's score is its arrival plus PARKED (see grant_next):
-- above every arrival until the clock passes 4e15 us (2096), and exact in
-- a double until the clock passes 5e15 us (2128).
local PARKED = 4000000000000000
local BELOW_PARKED = '(4000000000000000' -- ZCOUNT's bound below PARKED

-- Queues member, arriving at nows, unless it is queued; a member parked
-- behind the others (see grant_next) takes its place back. A member that
-- joins marks F, when it lives, as saying that waiters may be queued (see
-- fence_read in hold.lua). fv is F's value as the caller read it (false:
-- gone), when the script has not written F since; nil to read it here.
local function queue_join(member, nows, fv)
  if redis.call('ZADD', Q, 'NX', nows, member) == 1 then
    if fv == nil then
      fv = redis.call('GET', F)
    end
    local top, queued = fence_read(fv)
    if top and not queued then
      redis.call('SET', F, fv .. ' q', 'KEEPTTL')
    end
    return
  end
  local sc = tonumber(redis.call('ZSCORE', Q, member))
  if sc >= PARKED then
    redis.call('ZADD', Q, string.format('%.0f', sc - PARKED), member)
  end
end

-- Parks member, scored sc (a decimal string), behind the other waiters
-- (see grant_next), unless it was parked already: then it is dropped.
-- Reports whether it parked it.
local function park(member, sc)
  sc = tonumber(sc)
  if sc < PARKED then
    redis.call('ZADD', Q, string.format('%.0f', sc + PARKED), member)
    return true
  end
  return false
end

-- The number of waiters queued and not parked: those who wait their turn.
-- Publishes msg on channel ch, the channel of a waiter's Engine, and
-- returns how many subscribers it reached. A shard channel (a Cluster's:
-- "<channel>{<slot tag>}") is told with SPUBLISH, on the lock's shard only.
-- When that reaches nobody here (the Engine's subscription is not in place
-- yet, or is on a replica, or the server has no sharded pub/sub), the
-- Engine's own channel is told too, with PUBLISH, which reaches every node.
local function tell(ch, msg)
  if string.find(ch, '{', 1, true) then
    local n = redis.pcall('SPUBLISH', ch, msg)
    if type(n) ~= 'number' or n == 0 then
      n = redis.call('PUBLISH', string.match(ch, '^[^{]*'), msg)
    end
    return n
  end
  return redis.call('PUBLISH', ch, msg)
end

-- Tells each Engine with a waiter queued for the lock, once, msg: to have
-- its waiters ask again ("nudge <L>"), as a result was kept for it
-- (release.lua), which each finds with its next call, rather than the
-- lock in turn; or the result itself ("result <L>\n<result>"). A waiter
-- whose Engine is not told asks again within its recheck interval.
local function nudge_queued(msg)
  local told = {}
  for _, m in ipairs(redis.call('ZRANGE', Q, 0, -1)) do
    local ch = string.match(m, '^%d+ %d+ (%S+) ')
    if ch and not told[ch] then
      told[ch] = true
      tell(ch, msg)
    end
  end
end

local function queued_live()
  return redis.call('ZCOUNT', Q, '-inf', BELOW_PARKED)
end

-- Admit the waiters at the head of the queue, oldest first, while the
-- lock admits the first of them: an exclusive waiter when the lock is
-- free (L deleted), then nobody else; shared waiters one after another
-- while no exclusive hold is held and, for permits, fewer owners than
-- their Share hold it. A waiter whose deadline has passed is dropped.
-- The caller itself (member self) gets its whole lease. Any other waiter
-- gets the lock for claim ms and claims it within that window (a renewal,
-- or its next acquire call, extends it) or loses it when the window ends,
-- so that a waiter that vanished, or returned without its withdrawal
-- reaching Redis, delays the next one by one window at most. One waiter
-- of the caller's Locker (channel mine) is woken by the caller; any other
-- is told on its Locker's channel (on a Cluster, its shard channel of the
-- lock's slot). When trust is set (one Redis server: PUBLISH counts every
-- subscriber), a waiter whose channel nobody reads is skipped at once:
-- its process is gone, or its subscription dropped for a moment. It is
-- not dropped but parked: moved behind every waiter, its arrival kept
-- (PARKED is added to its score). Its next acquire call takes its place
-- back (queue_join), so a waiter whose subscription came back is next
-- once it asks again; it was passed over only for the hand-over it could
-- not be told of. Parked waiters hold nobody back: the others go first,
-- and a waiter that finds only parked ones queued does not wait for them
-- (queued_live). A parked waiter that nobody reads when it comes to the
-- front again in a later run is dropped, as is one whose deadline passed;
-- the run ends at the first waiter it parked itself. So each entry costs
-- at most two steps of the loop over the queue's life, and a channel found
-- unread is not published to again within the same run.
-- now is the server clock in microseconds, as a number and as nows, a
-- decimal string (now_us).
-- Returns whether a waiter was admitted; the fencing token of the caller,
-- when it was; and the attempt id and fencing token of the waiter the
-- caller is to wake, if any.
local function grant_next(now, nows, retention, self, mine, claim, trust)
  local any, selff, to, tof
  local now_ms = math.floor(now / 1000)
  local unread = {} -- channels that reached nobody in this run
  local parked = {} -- the waiters this run parked
  while true do
    local e = redis.call('ZRANGE', Q, 0, 0, 'WITHSCORES')
    if #e == 0 or parked[e[1]] then
      break -- what is left is parked
    end
    local dl, ttl, ch, id, tok, share = string.match(e[1], '^(%d+) (%d+) (%S+) (%S+) (%S+) ?(%-?%d*)$')
    if not dl or tonumber(dl) * 1000 <= now then
      redis.call('ZREM', Q, e[1])
    else
      local held, slot = redis.call('GET', L), -1
      if share == '' then
        if held then
          break
        end
      else
        if held and held ~= '~' then
          break
        end
        local n = tonumber(share)
        if n > 0 then
          local owners, free = shared_scan(nil, now_ms)
          if owners >= n then
            break
          end
          slot = free
        end
      end
      redis.call('ZREM', Q, e[1])
      if unread[ch] and e[1] ~= self and (ch ~= mine or to) then
        parked[e[1]] = park(e[1], e[2]) -- its channel reached nobody in this run already
      else
        local px = tonumber(ttl)
        if e[1] ~= self then
          px = math.min(claim, px)
        end
        -- Each admission draws its token with a reading of the clock of
        -- its own, and keeps it only once the waiter is told: a skipped
        -- waiter's token is handed to nobody, and is drawn again for the
        -- next.
        local f, fs, top, c
        if share == '' then
          f, fs, top, c = take(tok, px, id, nows, redis.call('EXISTS', Q) == 1)
        else
          f, fs, top, c = shared_take(tok, share, slot, id, px, nows, now_ms)
        end
        local told = true
        if e[1] == self then
          selff = f
        elseif ch == mine and not to then
          to, tof = id, f
        else
          local n = tell(ch, id .. ' ' .. fs .. ' ' .. px)
          if n == 0 and trust then
            told, unread[ch] = false, true
            parked[e[1]] = park(e[1], e[2])
            if share == '' then
              redis.call('DEL', L)
            else
              redis.call('ZREM', S, id)
              redis.call('HDEL', P, id)
              shared_settle(now_ms)
            end
          end
        end
        if told then
          fence_keep(F, top, c, retention)
          any = true
          if share == '' then
            break
          end
        end
      end
    end
  end
  return any, selff, to, tof
end
