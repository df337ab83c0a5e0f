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
-- ARGV[8..] per tier: events, window_us (P[i].E, P[i].W)
local WORDS = 3
--@insert window_head
--@insert params
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

--@insert sliding_fits

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
