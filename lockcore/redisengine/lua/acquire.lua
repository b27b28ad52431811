-- ARGV: token, ttl ms, fence retention ms, remaining wait ms (0: fail fast),
--       attempt id, waiter member ('' when failing fast), claim window ms,
--       '1' when PUBLISH counts every subscriber (one server, not a cluster),
--       the caller's Engine's bound on leases ms (Options.MaxTTL), the
--       Policy's Share (0 here; see shared.lua), and optionally the tokens
--       that may re-enter a hold they own (space-separated). A free lock is always taken with the token, which
--       the caller mints for the attempt: another token only re-enters.
-- Returns the fencing token (> 0) when the attempt holds the lock: it took
-- it, re-entered it, or finds it granted to it (which claims the grant: the
-- lease then runs ttl from now); {fencing token, owner token} when it
-- re-entered a hold of one of the other tokens; {0, 'upgrade'} when one of
-- them holds the lock shared (the request would wait for itself); or -pttl
-- (<= 0) when another owner holds it (and the attempt is queued when
-- waiting). Run again with
-- the same arguments, it returns the same and changes nothing more.
-- While the restart guard lives (see guard.lua), it returns the error
-- "GUARD <ms left>" (guard_refusal) and does nothing: a holder from before
-- the restart may still run.
-- KEYS: the hold, the wait queue, the last fencing token, the restart guard,
-- the shared entries and their fields; and, for an acquisition that wants
-- a stored result rather than the lock (lockcore.Request.Result), the
-- result's key (see release.lua).
-- With that key, a result stored there is returned as {0, 'result',
-- <entry>\n<result>}, whether the lock is free or not, and the attempt
-- is no longer queued: nothing is taken. A lock granted to the attempt
-- while it waited passes to the next waiter.
local L, Q, F, S, P, K = KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6], KEYS[7]
local tok, ttl, ret, wait = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local id, member = ARGV[5], ARGV[6]
-- One read for the restart guard, the last fence and the result: the
-- guard's key lives only while it may refuse (see guard.lua), so its value
-- alone says whether to ask how long it has left.
local gv, fv, kv
if K then
  gv, fv, kv = unpack(redis.call('MGET', KEYS[4], F, K))
else
  gv, fv = unpack(redis.call('MGET', KEYS[4], F))
end
local granted = false -- a result found by an attempt the lock was granted to
if kv then
  -- A stored result takes no lock, so the guard has nothing to refuse.
  if member ~= '' then
    redis.call('ZREM', Q, member)
  end
  local hv = redis.call('GET', L)
  local t, es
  if hv then
    local _f, _s, _w
    t, _f, _s, _w, es = hold_parse(hv)
  end
  if not t or t ~= tok or not hold_has(es, id) then
    return {0, 'result', kv}
  end
  redis.call('DEL', L)
  granted = true
elseif gv then
  local young = guard_young(KEYS[4], tonumber(ARGV[9]))
  if young > 0 then
    return guard_refusal(young)
  end
end

-- The fence is drawn before the lock is tried, so that a free lock is taken
-- by the SET itself, and kept only when the attempt holds the lock: an
-- attempt that finds it held, or gives it to the waiters queued for it,
-- draws nothing (see fence_next in hold.lua). A waiting acquisition that
-- took a free lock keeps it unless others queue for it, which it looks for
-- only when F says they may (see fence_read); failing fast, it does not
-- look, and F keeps saying what it said.
local last, queued = fence_read(fv)
local f, fs, top, c, v
if not granted then
  f, fs, top, c = fence_next(last, FENCE_RESERVE)
  v = redis.call('SET', L, hold_make(tok, fs, '0', false, id), 'NX', 'PX', ttl, 'GET')
  if not v then
    if member ~= '' and queued then
      queued = redis.call('EXISTS', Q) == 1
    end
    if member == '' or not queued then
      fence_keep(F, top, c, ret, not queued)
      return f
    end
  end
end
-- @common

if granted then
  if redis.call('EXISTS', Q) == 1 then
    local now, nows = now_us()
    grant_next(now, nows, ret, nil, '', tonumber(ARGV[7]), ARGV[8] == '1')
  end
  return {0, 'result', kv}
end

if not v then
  -- The lock was free but others queue for it (their holder expired, or a
  -- grant went unclaimed): the oldest waiter goes first, which may be this
  -- one.
  redis.call('DEL', L)
  local now, nows = now_us()
  queue_join(member, nows, fv)
  local any, g = grant_next(now, nows, ret, member, '', tonumber(ARGV[7]), ARGV[8] == '1')
  if g then
    return g
  elseif not any then
    -- Nobody waits any more (this attempt's own deadline passed too).
    redis.call('ZREM', Q, member)
    f, fs, top, c = take(tok, ttl, id, nows, redis.call('EXISTS', Q) == 1)
    fence_keep(F, top, c, ret)
    return f
  end
  return -math.max(redis.call('PTTL', L), 0)
end

local t, hf, hs, w, es = hold_parse(v)
local others = ARGV[11] or ''
if not t and others ~= '' then
  -- Shared holds (L is their marker): one of the request's own would wait
  -- for this attempt, which would wait for it.
  local now = now_us()
  local _, _, found = shared_scan(others, math.floor(now / 1000))
  if found then
    if member ~= '' then
      redis.call('ZREM', Q, member) -- queued on an earlier call
    end
    return {0, 'upgrade'}
  end
elseif t == tok or others ~= '' and hold_has(others, t) then
  if hold_has(es, id) then
    -- Granted to this attempt while it waited, or this call ran before.
    redis.call('PEXPIRE', L, ttl, 'GT')
  else
    -- Re-entry by the same owner from another process. A hold taken on
    -- the fast path (since 0, read from its first entry) gets its since
    -- written out now: its first entry may leave before the others.
    local nv
    if hs == '0' then
      nv = hold_make(t, hf, hold_start(es), w == '1', es .. ' ' .. id)
    else
      nv = hold_add(v, id)
    end
    redis.call('SET', L, nv, 'PX', math.max(redis.call('PTTL', L), ttl))
    if member ~= '' then
      redis.call('ZREM', Q, member)
    end
  end
  if t == tok then
    return tonumber(hf)
  end
  return {tonumber(hf), t}
end

if wait > 0 then
  local _, nows = now_us()
  queue_join(member, nows, fv)
  if redis.call('PTTL', Q) < wait + ttl then
    redis.call('PEXPIRE', Q, wait + ttl)
  end
  if w == '0' then
    redis.call('SET', L, hold_make(t, hf, hs, true, es), 'KEEPTTL')
  end
end
return -math.max(redis.call('PTTL', L), 0)
