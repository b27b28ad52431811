-- ARGV: token, ttl ms. Extends the lease of token's hold to at least ttl.
-- Returns 1 when token holds the lock, 0 when it does not.
if redis.call('HEXISTS', L, ARGV[1]) == 0 then
  return 0
end
if redis.call('PTTL', L) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', L, ARGV[2])
end
return 1
