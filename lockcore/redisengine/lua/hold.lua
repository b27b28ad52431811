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

-- Fencing tokens. A lock's tokens grow with the server's clock: four per
-- microsecond since 2009-08-11 (FENCE_EPOCH, in microseconds since 1970).
-- A draw takes the clock's token, or one more than the lock's last token
-- (F) when that is greater, and leaves F at the top of what it reserved.
-- What keeps tokens increasing once F is lost (a restart without
-- persistence, a failover to a replica that missed it, a retention that
-- lapsed) is that no token ever runs far ahead of the clock:
--   - a draw costs little clock: an exclusive hold reserves FENCE_RESERVE
--     tokens above its own, 4 us of clock, and two exclusive holds of one
--     lock are at least a round trip apart (one is released before the
--     next is drawn); a shared hold reserves none, a quarter of a us, and
--     a script that admits many runs several commands for each;
--   - nothing is drawn for an attempt that does not get the hold: an
--     acquisition that finds the lock held, a waiter that is skipped;
--   - a draw that would put F more than FENCE_LEAD ahead of the clock
--     (100 us) waits for the clock first (fence_next), so the bound holds
--     whatever the load; only a clock that stepped back, or a failed-over
--     master's clock behind the old one's, leaves F further ahead, and F
--     then orders the tokens while it lives;
--   - F lives until the clock has passed it, plus the fence retention
--     (fence_keep).
-- So a token is at most FENCE_LEAD above the clock when it is drawn, and
-- after a loss that took longer than that, the first draw is above every
-- token handed out before. Tokens stay exact in Lua's numbers (doubles,
-- exact to 2^53) until 2080. The scale keeps every token above those of
-- the versions that drew the clock's microseconds (one per us): the
-- clock's token is above the clock's microseconds by about 12 years' worth
-- in 2026, and grows three times as fast.
local FENCE_EPOCH, FENCE_PER_US, FENCE_LEAD = 1250000000000000, 4, 400

-- The tokens above its own that an exclusive hold reserves, for the
-- holders its Engine hands it to in memory, one after the other, without
-- a call to Redis first (Options.LocalHandOvers, at most 15 in a row; see
-- pass.lua): the next draw is above them all.
local FENCE_RESERVE = 15

-- The server clock as a fencing token.
local function fence_clock()
  local t = redis.call('TIME')
  return (tonumber(t[1]) * 1000000 + tonumber(t[2]) - FENCE_EPOCH) * FENCE_PER_US
end

-- The next fencing token after last (F's value, a number, or nil when F is
-- gone) for a hold that reserves reserve tokens above it: returns the token
-- as a number and a decimal string, the top of its reservation, and the
-- clock's token when it was drawn, for fence_keep. Nothing is written: the
-- caller keeps the draw only when the hold is handed out. A draw that
-- would lead the clock by more than FENCE_LEAD, by no more than one draw's
-- reservation (the clock has not stepped back), reads the clock again
-- until it does not (a few us at most, and a bounded number of reads).
local function fence_next(last, reserve)
  local c = fence_clock()
  local f = c
  if last and last >= f then
    f = last + 1
  end
  local over = f + reserve - c - FENCE_LEAD
  if over > 0 and over <= FENCE_RESERVE + 1 then
    for _ = 1, 1000 do
      c = fence_clock()
      if last + 1 + reserve <= c + FENCE_LEAD then
        break
      end
    end
    f = math.max(c, last + 1)
  end
  return f, string.format('%.0f', f), f + reserve, c
end

-- F, the lock's last fencing token, is "<top>" or "<top> q": the top of
-- the last draw's reservation, and " q" when waiters may be queued for the
-- lock (Q lives). Q never lives beside an F without the mark: queue_join
-- (common.lua) marks F when it starts a queue, and F is written without
-- the mark only where the script knows Q is gone (the acquire script's
-- fast path). So the acquire script, which reads F anyway, looks for a
-- queue (EXISTS) only when F is marked or gone, and a lock taken and
-- released with nobody waiting costs no read of Q. A mark that outlives
-- its queue costs one EXISTS, which clears it.
-- fence_read returns F's value v (false when F is gone) as top, a number
-- (nil when gone or unreadable), and whether waiters may be queued.
local function fence_read(v)
  local top, rest = string.match(v or '', '^(%d+)(.*)$')
  if not top then
    return nil, true
  end
  return tonumber(top), rest ~= ''
end

-- Keeps a draw of fence_next, whose reservation ends at top (c, the
-- clock's token it was drawn at, is not needed): F is top, kept for
-- retention ms (a decimal string) after the clock has passed it, and
-- marked as saying that waiters may be queued unless none_queued is true
-- (see fence_read). The
-- expiry is the absolute time top stands for, plus retention (PXAT), not a
-- length counted from the script's start, which a server may take as the
-- time of every command of a long script.
local function fence_keep(F, top, c, retention, none_queued)
  local at = math.ceil((top / FENCE_PER_US + FENCE_EPOCH) / 1000) + tonumber(retention)
  local v = string.format('%.0f', top)
  if none_queued ~= true then
    v = v .. ' q'
  end
  redis.call('SET', F, v, 'PXAT', string.format('%.0f', at))
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

-- How many ms more the restart guard G refuses fresh holds (<= 0: it does
-- not), for an Engine whose leases are at most bound ms (Options.MaxTTL):
-- while the guard lives (see guard.lua), a holder from before a restart
-- may still run, whichever Engine granted its lease. The guard lasts the
-- bound of the Engine that decided it, or the longer bound of this one
-- (the server's age is the guard's value less its pttl).
local function guard_young(G, bound)
  local g = redis.call('PTTL', G)
  if g > 0 then
    return math.max(g, bound - (tonumber(redis.call('GET', G)) - g))
  end
  return 0
end

-- The reply of a script that the restart guard refused for ms more: an
-- error, which no other outcome of a script is, so that the caller tells
-- it from a held lock.
local function guard_refusal(ms)
  return redis.error_reply('GUARD ' .. string.format('%.0f', ms))
end
