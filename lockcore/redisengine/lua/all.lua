-- Takes several locks at once, all or nothing: each with its own token and
-- attempt id, as the acquire script's fast path takes one free lock, and
-- only when every one of them is free and nobody queues for it. Their keys
-- share one Cluster slot.
-- KEYS: the restart guard, then each lock's hold, wait queue and last
--       fencing token.
-- ARGV: ttl ms, fence retention ms, the longest lease of the caller's
--       Engine ms (at least ttl), then each lock's token and attempt id.
-- Returns the fencing tokens, one per lock, in order; {0, i, pttl} when
-- lock i is held (for pttl ms more) or waited for, having written nothing;
-- or, like the acquire script, -(ms) while the restart guard refuses.
local young = guard_young(KEYS[1], tonumber(ARGV[3]))
if young > 0 then
  return -young
end
local n = (#KEYS - 1) / 3
for i = 1, n do
  local L = KEYS[3 * i - 1]
  if redis.call('EXISTS', L, KEYS[3 * i]) > 0 then
    return {0, i, math.max(redis.call('PTTL', L), 0)}
  end
end
-- Each lock's fence as the acquire script draws it (next_fence in
-- common.lua): the server clock in microseconds, or one more than the
-- lock's last token when that is greater.
local c = redis.call('TIME')
local now = c[1] .. string.sub('00000' .. c[2], -6)
local fences = {}
for i = 1, n do
  local F, fs = KEYS[3 * i + 1], now
  local last = tonumber(redis.call('SET', F, fs, 'PX', ARGV[2], 'GET'))
  if last and last >= tonumber(fs) then
    fs = string.format('%.0f', last + 1)
    redis.call('SET', F, fs, 'PX', ARGV[2])
  end
  redis.call('SET', KEYS[3 * i - 1], hold_make(ARGV[2 + 2 * i], fs, '0', false, ARGV[3 + 2 * i]), 'PX', ARGV[1])
  fences[i] = tonumber(fs)
end
return fences
