-- KEYS: the restart guard, the run id of the server it was decided for.
-- ARGV: how long after the server started no fresh hold may be taken, in
--       ms (the longest lease a holder from before a restart may still
--       believe it has).
-- Run when Redis answers NOSCRIPT, before any script is loaded: a server
-- that lost its script cache may have lost its data too, and with it the
-- holds of holders that still run. Once per run of the server (its
-- run_id, which a restart changes, even one that reloads a snapshot):
-- when it started less than that long ago and keeps no append-only file
-- (AOF, which a restart reloads whole), the guard is set to expire that
-- long after the start; the acquire script takes no fresh hold while it
-- lives. A server that does not say when it started gets none.
-- Returns the guard's ms left, 0 when none.
local info = redis.call('INFO', 'server')
local up, run = string.match(info, 'uptime_in_seconds:(%d+)'), string.match(info, 'run_id:(%x+)')
if not up or not run then
  return 0
end
if redis.call('GET', KEYS[2]) == run then
  return math.max(redis.call('PTTL', KEYS[1]), 0)
end
redis.call('SET', KEYS[2], run)
if string.match(redis.call('INFO', 'persistence'), 'aof_enabled:(%d)') == '1' then
  return 0
end
-- Uptime counts whole seconds: the start it gives is the latest possible,
-- so the guard lasts at least as long as asked.
local left = tonumber(ARGV[1]) - tonumber(up) * 1000
if left <= 0 then
  return 0
end
redis.call('SET', KEYS[1], '1', 'PX', left)
return left
