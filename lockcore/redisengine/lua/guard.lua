-- KEYS: the restart guard, the run id of the server it was decided for.
-- ARGV: how long after the server started the guard lives, in ms: the
--       calling Engine's bound on every lease (Options.MaxTTL), which every
--       Engine on the server shares.
-- Run when Redis answers NOSCRIPT, before any script is loaded: a server
-- that lost its script cache may have lost its data too, and with it the
-- holds of holders that still run, whichever Engine granted them. Once per
-- run of the server (its run_id, which a restart changes, even one that
-- reloads a snapshot): when it started less than that long ago and keeps
-- no append-only file (AOF, which a restart reloads whole), the guard is
-- set to expire that long after the start, its value that length, so that
-- its age is the server's: the value less the guard's pttl. While it
-- lives, the acquire script takes no fresh hold (see guard_young in
-- hold.lua). The length is not the longest lease of the Engine that meets
-- the restart first, which may have granted none of the lost holds: the
-- server that lost them cannot tell how long they were, so the guard lasts
-- the bound every lease is kept within. An Engine with a longer bound that
-- comes later in the same run lengthens a guard that still lives.
-- A server that does not say when it started gets none.
-- Both keys are the server's, whatever the Engines' prefixes: the script
-- cache that tells of a restart is the server's too.
-- Returns the guard's ms left, 0 when none, and 1 when this call set or
-- lengthened it, else 0.
local info = redis.call('INFO', 'server')
local up, run = string.match(info, 'uptime_in_seconds:(%d+)'), string.match(info, 'run_id:(%x+)')
if not up or not run then
  return {0, 0}
end
local bound = tonumber(ARGV[1])
if redis.call('GET', KEYS[2]) == run then
  local g = redis.call('PTTL', KEYS[1])
  if g <= 0 then
    return {0, 0}
  end
  local left = bound - (tonumber(redis.call('GET', KEYS[1])) - g)
  if left <= g then
    return {g, 0}
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', left)
  return {left, 1}
end
redis.call('SET', KEYS[2], run)
if string.match(redis.call('INFO', 'persistence'), 'aof_enabled:(%d)') == '1' then
  return {0, 0}
end
-- Uptime is the whole seconds of the server's clock now less those of its
-- start: it reads 1 as soon as the clock passes a second's mark, which may
-- be a few ms after the start. The server is older than uptime - 1 s
-- (never less than 0) and the guard counts from that, so that it lasts at
-- least as long as asked.
local left = bound - math.max(tonumber(up) - 1, 0) * 1000
if left <= 0 then
  return {0, 0}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', left)
return {left, 1}
