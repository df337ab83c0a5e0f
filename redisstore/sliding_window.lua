-- sliding_window.lua: the Redis twin of algorithms/sliding_window.go; read
-- the model there. Per tier the previous and the current window's counts
-- (aligned to the Unix epoch); the previous one is weighted by how much of it
-- still overlaps the rolling window. The weighted part is a double computed
-- in the same order as the Go twin (multiply, then divide), so both round
-- alike.
--
-- KEYS[1]  state: "<t> <s_1> <p_1> <c_1> ... <s_n> <p_n> <c_n>": the latest
--          instant seen (µs), then per tier the window start (µs), the
--          previous and the current count (see load_state)
-- ARGV[8..] per tier: events, window_us
local WORDS = 3
--@insert window_head
local start, prev, cur = {}, {}, {}
for i = 1, N do
  start[i] = st[3 * i - 1] or 0
  cur[i] = st[3 * i + 1] or 0
  prev[i] = st[3 * i] or 0
end

--@insert clamp

-- save: the state lives until no window holding units weighs any more.
local function save()
  local v = {t}
  for i = 1, N do
    v[3 * i - 1] = start[i]
    v[3 * i] = prev[i]
    v[3 * i + 1] = cur[i]
  end
  save_tiers(key, v, function(i)
    if cur[i] > 0 then return start[i] + 2 * P[i].W - t end
    if prev[i] > 0 then return start[i] + P[i].W - t end
    return 0
  end)
end

--@insert window_undo
local ok = true

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

-- wait_of: how long until cost units fit tier i if nothing else arrives.
local function wait_of(i, cost)
  local p = P[i]
  if cost > p.E then return p.W end
  local e = t - start[i]
  local x = first(p, prev[i], cur[i], e, cost)
  if x >= 0 then return x - e end
  x = first(p, cur[i], 0, 0, cost)
  if x >= 0 then return start[i] + p.W + x - t end
  return start[i] + 2 * p.W - t
end

-- remaining: the units tier i admits now, floor(E - estimate), at least 0.
local function remaining(i)
  local p = P[i]
  local rem = p.E - cur[i] - math.ceil(weighted(p, prev[i], t - start[i]))
  if rem < 0 then return 0 end
  return rem
end

for i = 1, N do
  local p = P[i]
  local ws = win_start(t, p.W)
  if ws ~= start[i] then
    if ws == start[i] + p.W then prev[i] = cur[i] else prev[i] = 0 end
    cur[i] = 0
    start[i] = ws
  end
  if COST > p.E or not fits(p, prev[i], cur[i], t - start[i], COST) then ok = false end
end
--@insert window_count

--@insert win_offer_loop
  if cur[i] > 0 then
    reset = start[i] + 2 * p.W - t
  elseif prev[i] > 0 then
    reset = start[i] + p.W - t
  end
  if not ok then wait = wait_of(i, COST) end
  pick.offer(i - 1, p.E, remaining(i), reset, wait)
end
-- The first instant the estimate leaves room for one unit more.
return blocking(pick.result(function(i) return wait_of(i, remaining(i) + 1) end))
