-- Closes or opens a resource's gate (lockcore.Gatekeeper): writes the
-- gates hash and tells every Engine on the gates channel, from this one
-- server, so that the messages reach every subscriber in the order of the
-- writes (on a Cluster, messages published on different nodes may not).
-- KEYS: the gates hash.
-- ARGV: the gates channel, the escaped key, and "<since ms> <until ms>" to
--       close its gate, or '' to open it; with a fourth argument, the value
--       of a gate whose time is up, which is dropped only if the hash still
--       has it (it may have been closed again since it was read), and
--       without a message: every Engine opens it by the clock.
if ARGV[4] then
  if redis.call('HGET', KEYS[1], ARGV[2]) == ARGV[4] then
    redis.call('HDEL', KEYS[1], ARGV[2])
  end
elseif ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[2])
  redis.call('PUBLISH', ARGV[1], 'open ' .. ARGV[2])
else
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  redis.call('PUBLISH', ARGV[1], 'close ' .. ARGV[2] .. ' ' .. ARGV[3])
end
return 1
