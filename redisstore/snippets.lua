-- snippets.lua: Lua that several scripts share word for word, written once.
-- The Go side places a snippet where a script says "--@insert <name>" on a
-- line of its own, with that line's indentation, before Redis ever sees the
-- script (see libprune.go): the script runs as if written out, at no cost a
-- call, where a function of lib.lua would be a closure built and called on
-- every call. A snippet is the text between "--@snippet <name>" and
-- "--@end"; each one is inserted somewhere, and uses the names of the
-- scripts that insert it.

-- Besides these, the Go side writes two snippets from its table of
-- algorithms (algorithms.go): params, which every algorithm's script
-- inserts, builds P, each tier's constants by name (P[i].E, P[i].W, ...),
-- and lease_params names those of every algorithm lease.lua charges.

-- The head of the window scripts (one string of state): the state and the
-- key's block in one MGET; a blocked key answers before anything else,
-- then the state (WORDS integers a tier).
--@snippet window_head
local key = KEYS[1]
local refused, s = load_blocked(key)
if refused then return refused end
local st, exists = state_of(s, 1 + WORDS * N)
--@end

-- clamp: t, the instant of the call, never goes back from the latest one
-- seen, st[1] (load_state).
--@snippet clamp
local t = NOW
if exists and t < st[1] then t = st[1] end
--@end

-- window_undo: an undo gives back COST units to each tier's current
-- window, if the units were counted in it.
--@snippet window_undo
if MODE == '1' then
  return undo(exists, function(i)
    if start[i] == win_start(t, P[i].W) then
      cur[i] = cur[i] - math.min(COST, cur[i])
    end
  end, save)
end
--@end

-- window_count: count COST in every tier when all admit it, else (with
-- count_rejected) up to each tier's limit; then save.
--@snippet window_count
if ok then
  for i = 1, N do cur[i] = cur[i] + COST end
elseif COUNT_REJECTED then
  for i = 1, N do cur[i] = add_capped(cur[i], P[i].E) end
end
save()
--@end

-- sliding_fits: sliding_window's arithmetic (algorithms/sliding_window.go),
-- shared by its script and the leasing one: the weighted previous count,
-- whether a cost fits, and the first offset at which it does.
--@snippet sliding_fits
-- weighted: the part of a previous count pc still inside the rolling window
-- at offset e.
local function weighted(p, pc, e)
  if pc == 0 then return 0 end
  return (pc * (p.W - e)) / p.W
end

-- fits: whether cost units fit at offset e of a window whose previous and
-- current counts are pc and cc.
local function fits(p, pc, cc, e, cost)
  local a = p.E - cost - cc
  return a >= 0 and weighted(p, pc, e) <= a
end

-- first: the smallest x in [lo, W) with fits(pc, cc, x, cost), or -1.
local function first(p, pc, cc, lo, cost)
  local a = p.E - cost - cc
  if a < 0 then return -1 end
  if fits(p, pc, cc, lo, cost) then return lo end
  local W = p.W
  if not fits(p, pc, cc, W - 1, cost) then return -1 end
  -- The answer is in (lo, W-1]; fits is monotone in x: the closed form
  -- first (almost always exact), then a bisection, at most log2(W) < 50
  -- rounds whatever the rounding.
  local f = math.ceil(W - a * W / pc)
  local bad, good = lo, W - 1
  if f > bad and f < good then
    if fits(p, pc, cc, f, cost) then
      good = f
      if f - 1 > bad and not fits(p, pc, cc, f - 1, cost) then bad = f - 1 end
    else
      bad = f
    end
  end
  while good - bad > 1 do
    local m = bad + idiv(good - bad, 2)
    if fits(p, pc, cc, m, cost) then good = m else bad = m end
  end
  return good
end
--@end

-- win_offer_loop opens the loop that offers each tier to win_pick once the
-- state is saved; the script computes the tier's reset and wait, offers it,
-- and closes the loop.
--@snippet win_offer_loop
local pick = win_pick(ok)
for i = 1, N do
  local p = P[i]
  local reset, wait = 0, 0
--@end

-- bucket_advance: clamp t to the latest instant seen and, when time went
-- on, move every tier's level to t with the script's flow(lv, dt, p) under
-- the constants it was saved under (old[i]).
--@snippet bucket_advance
local t = NOW
if t <= last then
  t = last
else
  local dt = t - last
  last = t
  for i = 1, N do level[i] = flow(level[i], dt, old[i]) end
end
--@end

-- bucket_charge_loop opens the loop that charges each tier a take's cost,
-- when all admit it or count_rejected; c is the cost, capped for the
-- clamp that follows. The script applies c to the tier and closes the
-- loop and the if.
--@snippet bucket_charge_loop
if allowed or COUNT_REJECTED then
  for i = 1, N do
    local p = P[i]
    local c = COST
    if c > 2 * p.burst then c = 2 * p.burst end -- the clamp below gives the same level
--@end

-- token_tier is the body of a token bucket's tier(i) for bucket_result: its
-- remaining units, reset, wait and more (µs) at level[i] under P[i].
--@snippet token_tier
local p, lv = P[i], level[i]
local rem, wait, more = 0, 0, 0
if lv > 0 then rem = idiv(lv, p.scale) end
local need = COST * p.scale - lv
if need > 0 then wait = cdiv(need, p.rate) end
if rem < p.burst then more = cdiv((rem + 1) * p.scale - lv, p.rate) end
return rem, cdiv(p.cap - lv, p.rate), wait, more
--@end
