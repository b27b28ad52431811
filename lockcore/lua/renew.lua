-- KEYS: the hold. ARGV: token, ttl ms. Extends the lease of token's hold to
-- at least ttl. Returns 1 when token holds the lock, 0 when it does not.
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
return 1
