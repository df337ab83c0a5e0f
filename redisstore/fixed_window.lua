-- fixed_window.lua: the Redis twin of algorithms/fixed_window.go; read the
-- model there. One counter per tier for the current window, windows aligned
-- to the Unix epoch (so up to 2 x Events may pass around a boundary).
--
-- KEYS[1]  state: "<t> <s_1> <c_1> ... <s_n> <c_n>": the latest instant seen
--          (µs), then per tier the window start (µs) and the count (see
--          load_state)
-- ARGV[8..] per tier: events, window_us
local key = KEYS[1]
local P = {}
for i = 1, N do
  local o = 7 + (i - 1) * 2
  P[i] = {E = tonumber(ARGV[o + 1]), W = tonumber(ARGV[o + 2])}
end

local st, exists = load_state(key)
local start, count = {}, {}
for i = 1, N do
  start[i] = st[2 * i] or 0
  count[i] = st[2 * i + 1] or 0
end

-- clamp: time never goes back.
local t = NOW
if exists and t < st[1] then t = st[1] end

local function save()
  local v = {t}
  local horizon = 0
  for i = 1, N do
    v[2 * i] = start[i]
    v[2 * i + 1] = count[i]
    if count[i] > 0 and start[i] + P[i].W - t > horizon then horizon = start[i] + P[i].W - t end
  end
  save_state(key, v, horizon)
end

if MODE == '1' then
  if not exists then return 0 end
  for i = 1, N do
    if start[i] == t - fmod(t, P[i].W) then
      local c = count[i]
      if COST < c then c = COST end
      count[i] = count[i] - c
    end
  end
  save()
  return 0
end

local ok = true
for i = 1, N do
  local p = P[i]
  local ws = t - fmod(t, p.W)
  if ws ~= start[i] then
    start[i] = ws
    count[i] = 0
  end
  if COST > p.E or count[i] > p.E - COST then ok = false end
end
if ok then
  for i = 1, N do count[i] = count[i] + COST end
elseif COUNT_REJECTED then
  for i = 1, N do
    local p = P[i]
    if COST >= p.E - count[i] then count[i] = p.E else count[i] = count[i] + COST end
  end
end
save()

local pick = win_pick(ok)
for i = 1, N do
  local p = P[i]
  local reset, wait = 0, 0
  if count[i] > 0 then reset = start[i] + p.W - t end
  if not ok then
    if COST > p.E then
      wait = p.W
    elseif count[i] > p.E - COST then
      wait = start[i] + p.W - t
    end
  end
  pick.offer(i - 1, p.E, p.E - count[i], reset, wait)
end
return pick.result()
