-- ARGV: fence retention ms, the prefix of the Engines' channels ('' to
--       tell no holder), claim window ms, '1' when PUBLISH counts every
--       subscriber, the operator's reason, audit retention ms, how many
--       audit records to keep (about), the owner digest's salt, how long
--       to keep the call's record ms
-- Force-releases the hold, whoever holds it: deletes it, names its entries
-- in the tombstone R for as long as the hold would have lived (a renewal
-- or release of one of them then answers "revoked"), draws a fencing
-- token past the hold's fence, hands the lock to the next waiter as a
-- release does, appends an audit record to the stream A, and tells each
-- holding Engine, on its channel, "revoke <entry>".
-- Returns 0 when nobody holds the lock, else {revoked fence, the fencing
-- token drawn, owner digest, server time in microseconds}, all strings. Every
-- run leaves a record of what it returned in O, a key named after the call
-- (random, unique to it), so that the same call run again (a client re-sent
-- it after a lost reply) returns that and does nothing more: it neither
-- revokes a hold taken after a first run that found the lock free, nor the
-- next holder after a first run that revoked.
-- A lock held shared (L is the marker) is revoked from every owner: each
-- entry whose lease has not ended is tombstoned and told; the record names
-- the owner that has held longest and the greatest fence.
-- KEYS: the hold, the wait queue, the last fencing token, the revoked entries,
-- the audit stream, the call's record, the shared entries and their fields.
local L, Q, F = KEYS[1], KEYS[2], KEYS[3]
local R, A, O = KEYS[4], KEYS[5], KEYS[6]
local S, P = KEYS[7], KEYS[8]
local ret, chp = ARGV[1], ARGV[2]
local done = redis.call('GET', O)
if done == '0' then
  return 0
elseif done then
  local f, n, o, at = string.match(done, '^(%S+) (%S+) (%S+) (%S+)$')
  return {f, n, o, at}
end
-- @common
local v = redis.call('GET', L)
if not v then
  redis.call('SET', O, '0', 'PX', ARGV[9])
  return 0
end
local t, f, es, _
if v == '~' then
  -- The entries whose lease has not ended; the owner named is the one
  -- that has held longest.
  local kv = redis.call('HGETALL', P)
  local ids, top, first = {}, 0, nil
  local live_after = math.floor(now_us() / 1000)
  for i = 1, #kv, 2 do
    local _, _, fs, since, tk = string.match(kv[i + 1], '^(%S+) (%S+) (%S+) (%S+) (%S+)$')
    local sc = tonumber(redis.call('ZSCORE', S, kv[i]))
    if tk and sc and sc > live_after then
      ids[#ids + 1] = kv[i]
      if not first or tonumber(since) < first then
        t, first = tk, tonumber(since)
      end
      if tonumber(fs) > top then
        top, f = tonumber(fs), fs
      end
    end
  end
  es = table.concat(ids, ' ')
else
  t, f, _, _, es = hold_parse(v)
end
if not t then
  if v == '~' then
    redis.call('DEL', L, S, P)
    redis.call('SET', O, '0', 'PX', ARGV[9])
    return 0
  end
  return redis.error_reply('ERR routelock: the hold is not in a known format')
end
local pttl = redis.call('PTTL', L)
redis.call('DEL', L, S, P)

local gone, keep = es, math.max(pttl, 1)
local old = redis.call('GET', R)
if old then
  gone = old .. ' ' .. es
  keep = math.max(keep, redis.call('PTTL', R))
end
redis.call('SET', R, gone, 'PX', keep)

local _, nfs = next_fence(ret, 0)
local now, nows = now_us()
if redis.call('EXISTS', Q) == 1 then
  grant_next(now, nows, ret, nil, '', tonumber(ARGV[3]), ARGV[4] == '1')
end

local owner = string.sub(redis.sha1hex(ARGV[8] .. t), 1, 12)
redis.call('XADD', A, 'MAXLEN', '~', ARGV[7], '*',
  'owner', owner, 'fence', f, 'new', nfs, 'reason', ARGV[5], 'at', nows)
redis.call('PEXPIRE', A, ARGV[6])

if chp ~= '' then
  for e in string.gmatch(es, '%S+') do
    local engine = string.match(e, '^([^.]+)%.')
    if engine then
      redis.call('PUBLISH', chp .. engine, 'revoke ' .. e)
    end
  end
end
redis.call('SET', O, f .. ' ' .. nfs .. ' ' .. owner .. ' ' .. nows, 'PX', ARGV[9])
return {f, nfs, owner, nows}
