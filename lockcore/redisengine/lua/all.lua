-- Takes several locks at once, all or nothing: each with its own token and
-- attempt id, as the acquire script's fast path takes one free lock, and
-- only when every one of them is free and nobody queues for it. Their keys
-- share one Cluster slot.
-- KEYS: the restart guard, then each lock's hold, wait queue and last
--       fencing token.
-- ARGV: ttl ms, fence retention ms, the caller's Engine's bound on
--       leases ms (Options.MaxTTL), then each lock's token and attempt id.
-- Returns the fencing tokens, one per lock, in order; {0, i, pttl} when
-- lock i is held (for pttl ms more; 0: free, but waited for) or waited for,
-- having written nothing; or, like the acquire script, the error
-- "GUARD <ms>" while the restart guard refuses. Run again with the same arguments (a client
-- re-sent it after a lost reply), it finds its own holds and returns their
-- fences again; or {0, 0, 0} when only some of them are left (released
-- or expired meanwhile), which the caller withdraws.
local young = guard_young(KEYS[1], tonumber(ARGV[3]))
if young > 0 then
  return guard_refusal(young)
end
local n = (#KEYS - 1) / 3
local fences, mine, busy = {}, 0, nil
for i = 1, n do
  local L = KEYS[3 * i - 1]
  local v = redis.call('GET', L)
  local t, hf, since, w, es
  if v then
    t, hf, since, w, es = hold_parse(v)
  end
  if t and t == ARGV[2 + 2 * i] and hold_has(es, ARGV[3 + 2 * i]) then
    mine, fences[i] = mine + 1, tonumber(hf)
  elseif not busy and (v or redis.call('EXISTS', KEYS[3 * i]) == 1) then
    busy = i
  end
end
if mine == n then
  return fences
elseif mine > 0 then
  return {0, 0, 0}
elseif busy then
  return {0, busy, math.max(redis.call('PTTL', KEYS[3 * busy - 1]), 0)}
end
-- Each lock's fence as the acquire script draws it (fence_next in
-- hold.lua), with no tokens reserved: these holds are not handed over in
-- memory.
for i = 1, n do
  local F = KEYS[3 * i + 1]
  local f, fs, top, c = fence_next(fence_read(redis.call('GET', F)), 0)
  fence_keep(F, top, c, ARGV[2])
  redis.call('SET', KEYS[3 * i - 1], hold_make(ARGV[2 + 2 * i], fs, '0', false, ARGV[3 + 2 * i]), 'PX', ARGV[1])
  fences[i] = f
end
return fences
