-- KEYS: the hold. ARGV: entry (an attempt id), ttl ms. Extends the lease of
-- the hold that has entry to at least ttl from now. Returns 1 when it
-- does, 0 when there is no such hold.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local t, _, _, es = hold_parse(v)
if not t or not hold_has(es, ARGV[1]) then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
return 1
