-- KEYS: the hold. ARGV: token, entry, ttl ms. Extends the lease of token's
-- hold that has entry (an attempt id) to at least ttl from now. Returns 1
-- when it does, 0 when there is no such hold.
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' '
    or not string.find(v .. ' ', ' ' .. ARGV[2] .. ' ', #ARGV[1] + 1, true) then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[3], 'GT')
return 1
