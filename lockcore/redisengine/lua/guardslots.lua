-- The restart guard on a Cluster node: guard.lua's decision, made for
-- every slot the node serves. A Cluster's keys live in slots, so the guard
-- that one server keeps in one key is kept here in one key per slot,
-- "<ARGV[2]>{<tag>}" (ARGV[3] lists the tags, a hash tag in each slot, by
-- slot and space-separated), which the acquire script of a lock in that
-- slot reads (see guard_young in hold.lua). A node that restarted without
-- its data lost the holds of every slot it serves, and the call that met
-- NOSCRIPT first may be of any of them: each gets the guard, in this one
-- call, before any script is loaded again on the node.
-- KEYS: the guard of the slot of the call that met NOSCRIPT, which sends
--       the script to that slot's master; none when it is sent to a node
--       directly (Engine.RestartGuard).
-- ARGV: how long after the node started the guard lives, in ms (as in
--       guard.lua), the guard keys' name before their hash tag, the tags.
-- The node's run is not recorded: the guard of a slot is set to end that
-- long after the node started (never earlier than one it finds), which
-- is the same whenever, and however often, it is decided in a run, and a
-- node older than that, or with an append-only file, needs none.
-- Returns, as guard.lua, the guard's ms left, 0 when none, and 1 when this
-- call set or lengthened one, else 0.
local info = redis.call('INFO', 'server')
local up = string.match(info, 'uptime_in_seconds:(%d+)')
if not up or string.match(redis.call('INFO', 'persistence'), 'aof_enabled:(%d)') == '1' then
  return {0, 0}
end
local bound = tonumber(ARGV[1])
-- As in guard.lua: the node is older than its uptime less a second.
local left = bound - math.max(tonumber(up) - 1, 0) * 1000
if left <= 0 then
  return {0, 0}
end
local tags = {}
for t in string.gmatch(ARGV[3], '%S+') do
  tags[#tags + 1] = t
end
local me, set = redis.call('CLUSTER', 'MYID'), 0
for _, r in ipairs(redis.call('CLUSTER', 'SLOTS')) do
  if r[3][3] == me then
    for s = r[1], r[2] do
      local g = ARGV[2] .. '{' .. tags[s + 1] .. '}'
      if redis.call('PTTL', g) < left then
        redis.call('SET', g, ARGV[1], 'PX', left)
        set = 1
      end
    end
  end
end
return {left, set}
