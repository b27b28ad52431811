-- KEYS: the hold, the wait queue, the revoked entries.
-- ARGV: the holder's token and entry, its successor's token, entry (the
--       successor's attempt id) and fencing token, the successor's lease
--       ms, the successor's waiter member, and the waiter members of the
--       successors in between, which handed the hold on in memory before
--       their own call was sent.
-- Makes the exclusive hold that the holder's entry alone has the
-- successor's: its Engine handed the hold over in memory, to an attempt of
-- its own that waited (Options.LocalHandOvers), which runs already. The
-- successor's fencing token is one of the holder's reserved ones (see
-- FENCE_RESERVE in hold.lua), so the key's last fencing token stays above it; its waiter
-- member leaves the queue, with those in between, and the waiters flag stays; its lease is its
-- own ttl, or what is left of the holder's when that is longer.
-- Returns 1 when the successor holds the lock (also when this call ran
-- before: its lease then runs at least ttl from now), -3 when an operator revoked the holder's hold, -1 when the hold
-- is gone or not the holder's alone. Run again with the same arguments, it
-- returns the same and changes nothing more.
local L, Q = KEYS[1], KEYS[2]
local v = redis.call('GET', L)
if v then
  local t, hf, _, w, es = hold_parse(v)
  if t == ARGV[3] and hf == ARGV[5] and es == ARGV[4] then
    -- This call ran before: the caller counts the lease from this run.
    redis.call('PEXPIRE', L, ARGV[6], 'GT')
    redis.call('ZREM', Q, unpack(ARGV, 7))
    return 1
  end
  if t == ARGV[1] and es == ARGV[2] then
    local c = redis.call('TIME')
    local since = c[1] .. string.sub('00000' .. c[2], -6)
    -- The lease runs at least as long as the holder's did: the successor
    -- runs on that until this call is answered.
    local px = math.max(redis.call('PTTL', L), tonumber(ARGV[6]))
    redis.call('SET', L, hold_make(ARGV[3], ARGV[5], since, w == '1', ARGV[4]), 'PX', px)
    redis.call('ZREM', Q, unpack(ARGV, 7))
    return 1
  end
end
if hold_revoked(redis.call('GET', KEYS[3]), ARGV[2]) then
  return -3
end
return -1
