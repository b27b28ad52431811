-- KEYS: the hold, the revoked entries, the shared entries and their
-- fields. ARGV: entry (an attempt id), ttl ms.
-- Extends the lease of shared entry to at least ttl from now, unless it
-- ended already. Returns 1 when it does, 2 when an operator revoked it, 0
-- when there is no such entry.
local L, S, P = KEYS[1], KEYS[3], KEYS[4]
local e, ttl = ARGV[1], tonumber(ARGV[2])
local c = redis.call('TIME')
local now_ms = tonumber(c[1]) * 1000 + math.floor(tonumber(c[2]) / 1000)
local sc = tonumber(redis.call('ZSCORE', S, e))
if sc and sc > now_ms and redis.call('GET', L) == '~' then
  if sc < now_ms + ttl then
    redis.call('ZADD', S, now_ms + ttl, e)
    local px = math.max(redis.call('PTTL', L), ttl)
    redis.call('PEXPIRE', L, px)
    redis.call('PEXPIRE', S, px)
    redis.call('PEXPIRE', P, px)
  end
  return 1
end
if hold_revoked(redis.call('GET', KEYS[2]), e) then
  return 2
end
return 0
