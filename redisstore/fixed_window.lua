-- fixed_window.lua: the Redis twin of algorithms/fixed_window.go; read the
-- model there. One counter per tier for the current window, windows aligned
-- to the Unix epoch (so up to 2 x Events may pass around a boundary).
--
-- KEYS[1]  state: "<t> <s_1> <c_1> ... <s_n> <c_n>": the latest instant seen
--          (µs), then per tier the window start (µs) and the count (see
--          load_state)
-- ARGV[8..] per tier: events, window_us
local refused = blocked()
if refused then return refused end
local key = KEYS[1]
local P = tier_params({'E', 'W'})

local st, exists = load_state(key)
local start, count = {}, {}
for i = 1, N do
  start[i] = st[2 * i] or 0
  count[i] = st[2 * i + 1] or 0
end

-- clamp: time never goes back.
local t = NOW
if exists and t < st[1] then t = st[1] end

-- save: the state lives until the end of every window holding units.
local function save()
  local v = {t}
  for i = 1, N do
    v[2 * i] = start[i]
    v[2 * i + 1] = count[i]
  end
  save_tiers(key, v, function(i)
    if count[i] > 0 then return start[i] + P[i].W - t end
    return 0
  end)
end

if MODE == '1' then
  return undo(exists, function(i)
    if start[i] == win_start(t, P[i].W) then
      count[i] = count[i] - math.min(COST, count[i])
    end
  end, save)
end

local ok = true
for i = 1, N do
  local p = P[i]
  local ws = win_start(t, p.W)
  if ws ~= start[i] then
    start[i] = ws
    count[i] = 0
  end
  if COST > p.E or count[i] > p.E - COST then ok = false end
end
if ok then
  for i = 1, N do count[i] = count[i] + COST end
elseif COUNT_REJECTED then
  for i = 1, N do count[i] = add_capped(count[i], P[i].E) end
end
save()

local pick = win_pick(ok)
for i = 1, N do
  local p = P[i]
  local reset, wait = 0, 0
  if count[i] > 0 then reset = start[i] + p.W - t end
  if not ok then
    wait = win_wait(p, count[i], function() return start[i] + p.W - t end)
  end
  pick.offer(i - 1, p.E, p.E - count[i], reset, wait)
end
-- Nothing comes back before the window ends.
return blocking(pick.result(function(i) return start[i] + P[i].W - t end))
