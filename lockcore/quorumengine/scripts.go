package quorumengine

import "github.com/redis/go-redis/v9"

// The scripts each master runs. A number that may pass 2^53 never appears
// in them: fencing tokens are microseconds since 1970 at most a few
// thousand grants on (see seed), well below it, and are written with
// string.format('%.0f'), never tostring, which would round them.
//
// A lock's hash P{K}:l holds: t the holder's owner token, f its fencing
// token, i n r x s the instance, its name, the route, the trace and the
// time (ms) of the grant, d "1" once the holder released while entries
// remain, and one field e:<token> per re-entry by owner token, its value
// the re-entering instance.

// seed is the Lua that sets f to the key's next fencing token on this
// master, from its counter KEYS[2]: the counter plus one, or, when the
// counter is missing (never written, expired, or lost in a restart), the
// server's clock in microseconds.
const seed = `
local c = redis.call('GET', KEYS[2])
local f
if c then
  f = tonumber(c) + 1
else
  local tm = redis.call('TIME')
  f = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end
local fs = string.format('%.0f', f)
redis.call('SET', KEYS[2], fs, 'PX', 86400000)
`

// acquireScript: KEYS the lock, its counter, the master's restart guard,
// the attempt's given-up mark (see releaseScript). ARGV the owner token, the TTL in ms, instance, name, route, trace, and
// the tokens the acquisition may re-enter. Returns {1, fence} for a fresh
// grant (or a re-sent one of the same token), {2, fence, holder} for a
// re-entry, {0, pttl} when another owner holds it, {-1, guard ms} while
// the restart guard refuses fresh grants. A re-entry's reply ends with "1"
// when the holder's fence on this master is the one its quorum confirmed
// (claimScript sets c), "0" when it may be this master's own of the grant.
var acquireScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {0, 0}
end
local t = redis.call('HGET', KEYS[1], 't')
if t then
  if t == ARGV[1] then
    return {1, tonumber(redis.call('HGET', KEYS[1], 'f'))}
  end
  for i = 7, #ARGV do
    if ARGV[i] == t then
      redis.call('HSET', KEYS[1], 'e:' .. ARGV[1], ARGV[3])
      if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
      end
      return {2, tonumber(redis.call('HGET', KEYS[1], 'f')), t, redis.call('HGET', KEYS[1], 'c') or '0'}
    end
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local g = redis.call('PTTL', KEYS[3])
if g > 0 then
  return {-1, g}
end
` + seed + `
local tm = redis.call('TIME')
redis.call('HSET', KEYS[1], 't', ARGV[1], 'f', fs, 'i', ARGV[3], 'n', ARGV[4], 'r', ARGV[5], 'x', ARGV[6],
  's', string.format('%.0f', tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, f}
`)

// claimScript confirms a hold won by a quorum, on every master: it sets
// the hold's fencing token (the quorum's) and raises the counter to it,
// extends the hold, and creates it where it is missing (a master that
// lagged, or lost it). It is the renewal too. KEYS the lock, its counter,
// the revocation mark of the hold's fence, the given-up mark of the
// attempt that won the hold. ARGV the holder's token, the
// hold's own (the holder's, or a re-entry's), the TTL in ms, the fence,
// instance, name, route, trace. Returns {1} when the hold is there now,
// {0} when another owner holds the lock, {-2, reason} when an operator
// revoked the hold.
var claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[3])
if v then
  return {-2, v}
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {0}
end
local t = redis.call('HGET', KEYS[1], 't')
if t and t ~= ARGV[1] then
  return {0}
end
if not t then
  local tm = redis.call('TIME')
  redis.call('HSET', KEYS[1], 't', ARGV[1], 'i', ARGV[5], 'n', ARGV[6], 'r', ARGV[7], 'x', ARGV[8],
    's', string.format('%.0f', tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)))
  if ARGV[2] ~= ARGV[1] then
    redis.call('HSET', KEYS[1], 'd', '1')
  end
end
if ARGV[2] ~= ARGV[1] then
  redis.call('HSET', KEYS[1], 'e:' .. ARGV[2], ARGV[5])
end
redis.call('HSET', KEYS[1], 'f', ARGV[4], 'c', '1')
local c = redis.call('GET', KEYS[2])
if not c or tonumber(c) < tonumber(ARGV[4]) then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', 86400000)
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1}
`)

// releaseScript gives up the hold of a token (ARGV[1]) on a master: the
// holder's, which leaves the lock to its re-entries while any remain, or
// a re-entry's, which frees the lock when it was the last of a released
// holder's. It marks the attempt that took it given up on the master for
// ARGV[2] ms (the TTL), so that a call of the attempt that lands after it
// (a grant, a confirmation, sent before but delayed) takes nothing. KEYS
// the lock, the attempt's given-up mark. Returns 1 when it found the hold, else
// 0.
var releaseScript = redis.NewScript(`
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
local t = redis.call('HGET', KEYS[1], 't')
if not t then
  return 0
end
if t == ARGV[1] then
  redis.call('HSET', KEYS[1], 'd', '1')
elseif redis.call('HDEL', KEYS[1], 'e:' .. ARGV[1]) == 0 then
  return 0
elseif redis.call('HGET', KEYS[1], 'd') ~= '1' then
  return 1
end
for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(k, 1, 2) == 'e:' then
    return 1
  end
end
redis.call('DEL', KEYS[1])
return 1
`)

// inspectScript reads a lock on a master. KEYS the lock, its counter, its
// audit list. Returns {holder token or "", fence, pttl, re-entries,
// instance, name, route, trace, since ms, counter, audit records...}.
var inspectScript = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 't', 'f', 'i', 'n', 'r', 'x', 's')
local n = 0
if h[1] then
  for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(k, 1, 2) == 'e:' then
      n = n + 1
    end
  end
end
local out = {h[1] or '', h[2] or '0', redis.call('PTTL', KEYS[1]), n, h[3] or '', h[4] or '', h[5] or '', h[6] or '', h[7] or '0',
  redis.call('GET', KEYS[2]) or '0'}
for _, a in ipairs(redis.call('LRANGE', KEYS[3], 0, 99)) do
  out[#out + 1] = a
end
return out
`)

// revokeScript force-releases the hold of the owner ARGV[1] on a master,
// marks its fence revoked (for its renewals), raises the counter to the
// revocation's fence and keeps the audit record. KEYS the lock, its
// counter, its audit list, the revocation mark of the hold's fence. ARGV
// the owner token, the new fence, the audit record (JSON), the reason,
// how long the mark is kept in ms. Returns 1 when it removed the hold
// here, else 0.
var revokeScript = redis.NewScript(`
redis.call('SET', KEYS[4], ARGV[4], 'PX', ARGV[5])
local c = redis.call('GET', KEYS[2])
if not c or tonumber(c) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', 86400000)
end
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('LPUSH', KEYS[3], ARGV[3])
redis.call('LTRIM', KEYS[3], 0, 99)
return 1
`)

// guardScript decides a master's restart guard, once per run of the
// server, when a script call is answered NOSCRIPT (a restart empties the
// script cache, and may have emptied the data): when the server started
// less than ARGV[1] ms ago and keeps no append-only file, the guard
// (KEYS[1]) lives until the server is that old, and meanwhile the acquire
// script grants no fresh hold on it. KEYS the guard, the run id it was
// decided for. Returns the guard's ms left.
var guardScript = redis.NewScript(`
local ok, info = pcall(redis.call, 'INFO', 'server')
if not ok or type(info) ~= 'string' then
  return 0
end
local up, run = string.match(info, 'uptime_in_seconds:(%d+)'), string.match(info, 'run_id:(%x+)')
if not up or not run then
  return 0
end
if redis.call('GET', KEYS[2]) == run then
  return math.max(redis.call('PTTL', KEYS[1]), 0)
end
redis.call('SET', KEYS[2], run)
local okp, pers = pcall(redis.call, 'INFO', 'persistence')
if okp and type(pers) == 'string' and string.match(pers, 'aof_enabled:(%d)') == '1' then
  return 0
end
local left = tonumber(ARGV[1]) - math.max(tonumber(up) - 1, 0) * 1000
if left <= 0 then
  return 0
end
redis.call('SET', KEYS[1], '1', 'PX', left)
return left
`)
