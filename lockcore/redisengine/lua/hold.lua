-- The hold, KEYS[1], is a string "<token> <fence> <since> <w> <entry> [<entry> ...]":
-- the owner token, the fencing token, since = when the hold was taken
-- (the server clock in microseconds), or 0 for a free lock taken at once,
-- whose first entry then says when (a re-entry from another process writes
-- it out, since that entry may leave first), w = 1 when waiters may be queued, and
-- the hold's entries, the attempt ids of the acquisitions that hold it
-- (the one that took it, and re-entries made under the same token by
-- other processes). An attempt id "<engine id>.<seq>.<start>" always
-- contains a '.', which no token, fence, time or flag does, and names one
-- attempt of one Engine: it alone names the hold an attempt has; <start>
-- is when the attempt began, by its engine's clock (microseconds, base 36).
-- A call whose own entry is there already has
-- run before (a client re-sent it after a lost reply): it changes nothing.
-- These functions are the only code that reads or writes that format; the
-- engine's Go code reads it in parseHold (scripts.go).

-- The last fencing token key F keeps for a hold drawn fencing token f (a
-- number), as a decimal string: f + 15. The tokens above f up to it are
-- the hold's, for the holders its Engine hands it to in memory, one after
-- the other, without a call to Redis first (Options.LocalHandOvers, at
-- most 15 in a row; see pass.lua): the next draw is above them all.
local function fence_top(f)
  return string.format('%.0f', f + 15)
end

-- The hold of tok, fencing token fs and since s (decimal strings), waiters
-- flag w (a boolean) and entries es (space-separated).
local function hold_make(tok, fs, s, w, es)
  return tok .. ' ' .. fs .. ' ' .. s .. (w and ' 1 ' or ' 0 ') .. es
end

-- The fields of hold v: token, fence and since (decimal strings), waiters
-- flag ('0' or '1'), entries (space-separated); nil when v is not a hold.
local function hold_parse(v)
  return string.match(v, '^(%S+) (%d+) (%d+) ([01]) (.+)$')
end

-- Whether entries es include attempt id.
local function hold_has(es, id)
  return string.find(' ' .. es .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end

-- Hold v with one more entry, id.
local function hold_add(v, id)
  return v .. ' ' .. id
end

-- Entries es without id, which they include, and how many are left.
local function hold_drop(es, id)
  local s = ' ' .. es .. ' '
  local i = string.find(s, ' ' .. id .. ' ', 1, true)
  es = string.sub(s, 2, i - 1) .. string.sub(s, i + #id + 1, -2)
  if es == '' then
    return es, 0
  end
  local _, spaces = string.gsub(es, ' ', ' ')
  return es, spaces + 1
end

-- Whether hold v has the single entry id and no waiters: the field before
-- the last entry is the flag '0' (another entry would contain a '.').
local function hold_sole(v, id)
  return string.sub(v, -#id - 3) == ' 0 ' .. id
end

-- When the first of entries es began, as a since (see above): the <start>
-- of its attempt id, base 36, in decimal; '0' when it does not say.
local function hold_start(es)
  local s = string.match(es, '^[^ .]+%.[^ .]+%.([0-9a-z]+)[ ]') or string.match(es, '^[^ .]+%.[^ .]+%.([0-9a-z]+)$')
  local us = s and tonumber(s, 36)
  if not us then
    return '0'
  end
  return string.format('%.0f', us)
end

-- Whether attempt id held a hold that an operator revoked: the tombstone
-- r (the revoked holds' entries, space-separated, or nil) names it.
local function hold_revoked(r, id)
  return r and hold_has(r, id)
end

-- How many ms more the restart guard G refuses acquisitions of an Engine
-- whose longest lease is longest ms (<= 0: it does not): while the guard
-- lives (see guard.lua) and the server is younger than that lease, a
-- holder from before a restart may still run.
local function guard_young(G, longest)
  local g = redis.call('PTTL', G)
  if g > 0 then
    return longest - (tonumber(redis.call('GET', G)) - g)
  end
  return 0
end
