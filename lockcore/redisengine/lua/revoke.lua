-- ARGV: fence retention ms, the prefix of the Engines' channels ('' to
--       tell no holder), claim window ms, '1' when PUBLISH counts every
--       subscriber, the operator's reason, audit retention ms, how many
--       audit records to keep (about), the owner digest's salt, the
--       revocation's id (random, unique to the call)
-- Force-releases the hold, whoever holds it: deletes it, names its entries
-- in the tombstone R for as long as the hold would have lived (a renewal
-- or release of one of them then answers "revoked"), moves the fencing
-- counter past the hold's fence, hands the lock to the next waiter as a
-- release does, appends an audit record to the stream A, and tells each
-- holding Engine, on its channel, "revoke <entry>".
-- Returns 0 when nobody holds the lock, else {revoked fence, new fencing
-- counter, owner digest, server time in microseconds}, all strings. Run
-- again with the same arguments (a client re-sent it after a lost reply),
-- it finds its own audit record and returns what the first run did,
-- instead of revoking the next holder too.
-- KEYS: the hold, the wait queue, the fencing counter, the revoked entries,
-- the audit stream.
local L, Q, F = KEYS[1], KEYS[2], KEYS[3]
local R, A = KEYS[4], KEYS[5]
local ret, chp, op = ARGV[1], ARGV[2], ARGV[9]
for _, rec in ipairs(redis.call('XREVRANGE', A, '+', '-', 'COUNT', 16)) do
  local r = {}
  for i = 1, #rec[2], 2 do
    r[rec[2][i]] = rec[2][i + 1]
  end
  if r.op == op then
    return {r.fence, r.new, r.owner, r.at}
  end
end
-- @common
local v = redis.call('GET', L)
if not v then
  return 0
end
local t, f, _, w, es = hold_parse(v)
if not t then
  return redis.error_reply('ERR routelock: the hold is not in a known format')
end
local pttl = redis.call('PTTL', L)
redis.call('DEL', L)

local gone, keep = es, math.max(pttl, 1)
local old = redis.call('GET', R)
if old then
  gone = old .. ' ' .. es
  keep = math.max(keep, redis.call('PTTL', R))
end
redis.call('SET', R, gone, 'PX', keep)

local _, nfs = next_fence(ret)
local now, nows = now_us()
if w == '1' then
  grant_next(now, nows, ret, nil, '', tonumber(ARGV[3]), ARGV[4] == '1')
end

local owner = string.sub(redis.sha1hex(ARGV[8] .. t), 1, 12)
redis.call('XADD', A, 'MAXLEN', '~', ARGV[7], '*',
  'owner', owner, 'fence', f, 'new', nfs, 'reason', ARGV[5], 'at', nows, 'op', op)
redis.call('PEXPIRE', A, ARGV[6])

if chp ~= '' then
  for e in string.gmatch(es, '%S+') do
    local engine = string.match(e, '^([^.]+)%.')
    if engine then
      redis.call('PUBLISH', chp .. engine, 'revoke ' .. e)
    end
  end
end
return {f, nfs, owner, nows}
