-- KEYS: the hold, the revoked entries. ARGV: entry (an attempt id), ttl ms.
-- Extends the lease of the hold that has entry to at least ttl from now.
-- Returns 1 when it does, 2 when an operator revoked that hold, 0 when
-- there is no such hold.
local v = redis.call('GET', KEYS[1])
if v then
  local t, _, _, _, es = hold_parse(v)
  if t and hold_has(es, ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
    return 1
  end
end
if hold_revoked(redis.call('GET', KEYS[2]), ARGV[1]) then
  return 2
end
return 0
