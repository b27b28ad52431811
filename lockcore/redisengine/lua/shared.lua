-- The acquire script of a shared hold (Policy.Share: readers, permits).
-- ARGV: as acquire.lua's: token, ttl ms, fence retention ms, remaining wait
--       ms (0: fail fast), attempt id, waiter member ('' when failing
--       fast), claim window ms, '1' when PUBLISH counts every subscriber,
--       the caller's Engine's bound on leases ms, the Policy's Share
--       (-1: any number of holders; n > 0: n permits), and optionally the
--       tokens that may re-enter a hold they own (space-separated).
-- A shared attempt enters when no exclusive hold is held, nobody waits
-- ahead of it, and, for permits, fewer owners than its Share hold the
-- lock; it then takes the lowest slot none of them has. A hold of one of
-- the tokens is re-entered instead: a shared one with its slot and fence,
-- an exclusive one (a writer re-entering as a reader) as a re-entry of
-- that hold.
-- Returns {fencing token, slot (-1: none), owner token} when the attempt
-- holds a shared hold (took it, re-entered it, or finds it granted, which
-- claims the grant: the lease then runs ttl from now); {fencing token, -1,
-- owner token, 'x'} when it re-entered an exclusive hold; or -(ms until it
-- may get in) (<= 0) otherwise, queued when waiting. Run again with the
-- same arguments, it returns the same and changes nothing more. The
-- restart guard holds it off as it does acquire.lua.
-- KEYS: the hold, the wait queue, the last fencing token, the restart
-- guard, the shared entries and their fields.
local L, Q, F, S, P = KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6]
local tok, ttl, ret, wait = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local id, member, share, others = ARGV[5], ARGV[6], ARGV[10], ARGV[11] or ''
local young = guard_young(KEYS[4], tonumber(ARGV[9]))
if young > 0 then
  return guard_refusal(young)
end
-- @common
local claim, trust = tonumber(ARGV[7]), ARGV[8] == '1'
local now, nows = now_us()
local now_ms = math.floor(now / 1000)

-- Queue this attempt (when waiting) and let the queue admit whom it may,
-- in order; returns the reply.
local function queue()
  if wait <= 0 then
    return -shared_wait(now_ms)
  end
  queue_join(member, nows)
  if redis.call('PTTL', Q) < wait + ttl then
    redis.call('PEXPIRE', Q, wait + ttl)
  end
  local _, sf = grant_next(now, nows, ret, member, '', claim, trust)
  if sf then
    local _, slot = string.match(redis.call('HGET', P, id), '^(%S+) (%S+)')
    return {sf, tonumber(slot), tok}
  end
  return -shared_wait(now_ms)
end

local v = redis.call('GET', L)
if v and v ~= '~' then
  local t, hf, hs, w, es = hold_parse(v)
  if t and others ~= '' and hold_has(others, t) then
    -- A writer's request re-enters its hold as a reader: an entry of the
    -- exclusive hold (see acquire.lua).
    if not hold_has(es, id) then
      local nv
      if hs == '0' then
        nv = hold_make(t, hf, hold_start(es), w == '1', es .. ' ' .. id)
      else
        nv = hold_add(v, id)
      end
      redis.call('SET', L, nv, 'PX', math.max(redis.call('PTTL', L), ttl))
    else
      redis.call('PEXPIRE', L, ttl, 'GT')
    end
    if member ~= '' then
      redis.call('ZREM', Q, member)
    end
    return {tonumber(hf), -1, t, 'x'}
  end
  if t and wait > 0 and w == '0' then
    redis.call('SET', L, hold_make(t, hf, hs, true, es), 'KEEPTTL')
  end
  return queue()
end

-- Granted to this attempt while it waited, or this call ran before.
local mine = redis.call('HGET', P, id)
if mine and v then
  local sc = tonumber(redis.call('ZSCORE', S, id))
  if sc and sc > now_ms then
    if sc < now_ms + ttl then
      redis.call('ZADD', S, now_ms + ttl, id)
      shared_expire(math.max(redis.call('PTTL', L), ttl))
    end
    local _, slot, f, _, t = string.match(mine, '^(%S+) (%S+) (%S+) (%S+) (%S+)$')
    return {tonumber(f), tonumber(slot), t}
  end
end

local n = tonumber(share)
local owners, free, found, fv = 0, -1, nil, nil
if v and (n > 0 or others ~= '') then
  local toks = nil
  if others ~= '' then
    toks = others
  end
  owners, free, found, fv = shared_scan(toks, now_ms)
end
if found then
  -- A re-entry of a shared hold by its propagated token: its slot, fence
  -- and token.
  shared_add(id, fv, ttl, now_ms)
  if member ~= '' then
    redis.call('ZREM', Q, member)
  end
  local _, slot, f, _, t = string.match(fv, '^(%S+) (%S+) (%S+) (%S+) (%S+)$')
  return {tonumber(f), tonumber(slot), t}
end
if n <= 0 then
  free = -1
elseif not v then
  free = 0
end
if queued_live() == 0 and (n <= 0 or owners < n) then
  local f, _, top, c = shared_take(tok, share, free, id, ttl, nows, now_ms)
  fence_keep(F, top, c, ret)
  return {f, free, tok}
end
if member == '' and queued_live() > 0 then
  -- Failing fast behind a queue: let it admit whom it may (waiters whose
  -- deadline passed leave it); this attempt enters only if that empties it.
  grant_next(now, nows, ret, nil, '', claim, trust)
  v = redis.call('GET', L)
  if queued_live() == 0 and (not v or v == '~') then
    free = -1
    if n > 0 then
      owners, free = shared_scan(nil, now_ms)
    end
    if n <= 0 or owners < n then
      local f, _, top, c = shared_take(tok, share, free, id, ttl, nows, now_ms)
      fence_keep(F, top, c, ret)
      return {f, free, tok}
    end
  end
end
return queue()
