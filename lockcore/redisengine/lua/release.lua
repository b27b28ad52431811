-- ARGV: token (the caller's; the entry alone names the hold), entry (the
--       attempt id whose hold to drop), fence retention ms, waiter member
--       ('' when none), the caller's Engine channel, claim window ms, '1'
--       when PUBLISH counts every subscriber
-- Drops entry from the hold that has it, exclusive or shared, and hands the
-- lock to the next waiters, or frees it, when no entry is left (for a
-- shared entry: when the waiter at the head of the queue may enter). With a
-- member it first withdraws a waiter that gave up: if it was still queued,
-- the waiters behind it that the lock now admits (shared ones, behind a
-- writer that gave up) are admitted, and nothing else happens.
-- Returns the number of entries left (0: released; of a shared hold, those
-- of every owner), -1 when the hold has no
-- such entry (it never had, or this call ran before), -3 when an operator
-- revoked the entry's hold, -2 when the member was withdrawn from the
-- queue, or {entries left (-2 for a withdrawal), attempt id, fencing token}
-- when the lock went to a waiter
-- of the caller's own Engine, which the caller then wakes: nothing is
-- published. Run again with the same arguments, it changes nothing more.
-- KEYS: the hold, the wait queue, the last fencing token, the revoked
-- entries, the shared entries and their fields; and, to keep a result with
-- the release (Engine.Keep), the result's key.
-- With that key, ARGV 8 and 9 are the result and how long to keep it (ms):
-- the release stores "<entry>\n<result>" there only when the entry holds
-- the lock exclusively, before it lets the lock go; a run of the same call
-- that finds its own result there (re-sent after a lost reply) returns 0.
-- With waiters queued, each Engine with one is told first (nudge_queued):
-- the result itself when it is at most RESULT_IN_MESSAGE bytes, which a
-- waiter that wants it takes from the message, else to have its waiters
-- ask again, when one that wants the result finds it (acquire.lua). Then
-- the lock goes to the first in line, as with any release: a waiter that
-- wants the result and is granted it claims it with a call, which finds
-- the result and hands the lock on; one that left with the result from
-- the message hands it on with its withdrawal.
local L, Q, F, S, P, R = KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6], KEYS[7]
-- The largest result sent to the waiters' Engines with the message that
-- tells them of it: most responses, not a megabyte to every Engine.
local RESULT_IN_MESSAGE = 4096
local e, ret, member = ARGV[2], ARGV[3], ARGV[4]
local v
if member == '' then
  v = redis.call('GET', L)
  -- The common case: e is the hold's only entry, and nobody is queued.
  if v and hold_sole(v, e) then
    if R then
      redis.call('SET', R, e .. '\n' .. ARGV[8], 'PX', ARGV[9])
    end
    redis.call('DEL', L)
    return 0
  end
end
-- @common
if member ~= '' then
  if redis.call('ZREM', Q, member) == 1 then
    v = redis.call('GET', L)
    if (not v or v == '~') and redis.call('EXISTS', Q) == 1 then
      local now, nows = now_us()
      local _, _, to, fence = grant_next(now, nows, ret, nil, ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1')
      if to then
        return {-2, to, fence}
      end
    end
    return -2
  end
  v = redis.call('GET', L)
end
-- The entry alone names the hold: attempt ids are unique, and an attempt
-- may have re-entered a hold under another token than its own.
local t, f, s, w, es
if v then
  t, f, s, w, es = hold_parse(v)
end
if not t or not hold_has(es, e) then
  if v == '~' and redis.call('ZREM', S, e) == 1 then
    redis.call('HDEL', P, e)
    local now, nows = now_us()
    local now_ms = math.floor(now / 1000)
    shared_purge(now_ms)
    local left = shared_settle(now_ms)
    if redis.call('EXISTS', Q) == 1 then
      local _, _, to, fence = grant_next(now, nows, ret, nil, ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1')
      if to then
        return {left, to, fence}
      end
    end
    return left
  end
  if hold_revoked(redis.call('GET', KEYS[4]), e) then
    return -3
  end
  if R and redis.call('GETRANGE', R, 0, #e) == e .. '\n' then
    return 0
  end
  return -1
end
if R then
  redis.call('SET', R, e .. '\n' .. ARGV[8], 'PX', ARGV[9])
end
local left, n = hold_drop(es, e)
if n > 0 then
  redis.call('SET', L, hold_make(t, f, s, w == '1', left), 'KEEPTTL')
  return n
end
redis.call('DEL', L)
if w == '1' then
  if R then
    -- A result kept: the waiters that want it learn of it at once, first,
    -- rather than each taking the lock in turn to read it; the lock goes
    -- to the first in line all the same, as with any release, so that a
    -- waiter that wants the lock keeps its place.
    local msg = 'nudge ' .. L
    if #ARGV[8] <= RESULT_IN_MESSAGE then
      msg = 'result ' .. L .. '\n' .. ARGV[8]
    end
    nudge_queued(msg)
  end
  local now, nows = now_us()
  local _, _, to, fence = grant_next(now, nows, ret, nil, ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1')
  if to then
    return {0, to, fence}
  end
end
return 0
