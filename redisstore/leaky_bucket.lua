-- leaky_bucket.lua: the Redis twin of algorithms/leaky_bucket.go; read the
-- integer model there. Per tier a bucket holding `level` sub-units of water
-- that leaks at `rate` sub-units per microsecond; capacity `cap`; a unit is
-- `scale` sub-units. Delay is the time the water ahead of an admitted
-- request takes to leak.
--
-- KEYS[1]  state: "<t> <level_1> ... <level_n>": the latest instant seen
--          (µs) and the level per tier (see load_state)
-- ARGV[8..] per tier: rate, scale, cap, burst, window_us (from
--           algorithms.BucketParams)
local key = KEYS[1]
local P = {}
for i = 1, N do
  local o = 7 + (i - 1) * 5
  P[i] = {rate = tonumber(ARGV[o + 1]), scale = tonumber(ARGV[o + 2]), cap = tonumber(ARGV[o + 3]),
          burst = tonumber(ARGV[o + 4]), window = tonumber(ARGV[o + 5])}
end

local st, exists = load_state(key)
local last = st[1] or 0
local level = {}
for i = 1, N do
  level[i] = st[i + 1] or 0
end

local function leak(lv, dt, p)
  if lv <= 0 then return 0 end
  if dt >= cdiv(lv, p.rate) then return 0 end
  return lv - dt * p.rate
end

-- advance: clamp now to the latest instant seen and leak to it.
local t = NOW
if t <= last then
  t = last
else
  local dt = t - last
  last = t
  for i = 1, N do level[i] = leak(level[i], dt, P[i]) end
end

local function save()
  local v = {last}
  local horizon = 0
  for i = 1, N do
    v[i + 1] = level[i]
    local empty = cdiv(level[i], P[i].rate)
    if empty > horizon then horizon = empty end
  end
  save_state(key, v, horizon)
end

if MODE == '1' then
  if not exists then return 0 end
  for i = 1, N do
    local p = P[i]
    if COST <= p.burst then
      local lv = level[i] - COST * p.scale
      if lv > 0 then level[i] = lv else level[i] = 0 end
    end
  end
  save()
  return 0
end

local allowed = true
for i = 1, N do
  if COST > P[i].burst or level[i] + COST * P[i].scale > P[i].cap then
    allowed = false
    break
  end
end
local delay = 0
if allowed or COUNT_REJECTED then
  for i = 1, N do
    local p = P[i]
    if allowed then
      local w = cdiv(level[i], p.rate)
      if w > delay then delay = w end
    end
    local c = COST
    if c > 2 * p.burst then c = 2 * p.burst end -- the clamp below gives the same level
    local lv = level[i] + c * p.scale
    if lv > 2 * p.cap then lv = 2 * p.cap end
    level[i] = lv
  end
end
save()

local best = nil
for i = 1, N do
  local p = P[i]
  local lv = level[i]
  local v = {tier = i - 1, remaining = 0, reset = cdiv(lv, p.rate), wait = 0, impossible = false}
  if lv < p.cap then v.remaining = idiv(p.cap - lv, p.scale) end
  if allowed then
    if better_allowed(v, best) then best = v end
  else
    if COST > p.burst then
      v.impossible = true
      v.wait = p.window
    else
      local over = lv + COST * p.scale - p.cap
      if over > 0 then v.wait = cdiv(over, p.rate) end
    end
    if better_denied(v, best) then best = v end
  end
end

local retry = 0
if not allowed then
  retry = best.wait
  if retry <= 0 then retry = 1 end
end
return {allowed and 1 or 0, best.tier, P[best.tier + 1].burst, best.remaining, best.reset, retry, delay, 0}
