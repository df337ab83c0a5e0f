-- token_bucket.lua: the Redis twin of algorithms/token_bucket.go; read the
-- integer model there. Per tier a bucket of `level` sub-units, refilled at
-- `rate` sub-units per microsecond up to `cap`; a unit is `scale` sub-units.
--
-- KEYS[1]  state: "<t> <level_1> ... <level_n>": the latest instant seen
--          (µs) and the level per tier (see load_state)
-- ARGV[8..] per tier: rate, scale, cap, burst, window_us (from
--           algorithms.BucketParams, so both twins use the same constants)
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
  level[i] = st[i + 1] or P[i].cap
end

local function fill(lv, dt, p)
  local deficit = p.cap - lv
  if deficit <= 0 then return lv end
  if dt >= cdiv(deficit, p.rate) then return p.cap end
  return lv + dt * p.rate
end

-- advance: clamp now to the latest instant seen and refill to it.
local t = NOW
if t <= last then
  t = last
else
  local dt = t - last
  last = t
  for i = 1, N do level[i] = fill(level[i], dt, P[i]) end
end

local function save()
  local v = {last}
  local horizon = 0
  for i = 1, N do
    v[i + 1] = level[i]
    local full = cdiv(P[i].cap - level[i], P[i].rate)
    if full > horizon then horizon = full end
  end
  save_state(key, v, horizon)
end

if MODE == '1' then
  if not exists then return 0 end
  for i = 1, N do
    local p = P[i]
    if COST <= p.burst then
      local lv = level[i] + COST * p.scale
      if lv < p.cap then level[i] = lv else level[i] = p.cap end
    end
  end
  save()
  return 0
end

local allowed = true
for i = 1, N do
  if COST > P[i].burst or level[i] < COST * P[i].scale then
    allowed = false
    break
  end
end
if allowed or COUNT_REJECTED then
  for i = 1, N do
    local p = P[i]
    local c = COST
    if c > 2 * p.burst then c = 2 * p.burst end -- the clamp below gives the same level
    local lv = level[i] - c * p.scale
    if lv < -p.cap then lv = -p.cap end
    level[i] = lv
  end
end
save()

local best = nil
for i = 1, N do
  local p = P[i]
  local lv = level[i]
  local v = {tier = i - 1, remaining = 0, reset = cdiv(p.cap - lv, p.rate), wait = 0, impossible = false}
  if lv > 0 then v.remaining = idiv(lv, p.scale) end
  if allowed then
    if better_allowed(v, best) then best = v end
  else
    if COST > p.burst then
      v.impossible = true
      v.wait = p.window
    else
      local need = COST * p.scale - lv
      if need > 0 then v.wait = cdiv(need, p.rate) end
    end
    if better_denied(v, best) then best = v end
  end
end

local retry = 0
if not allowed then
  retry = best.wait
  if retry <= 0 then retry = 1 end
end
return {allowed and 1 or 0, best.tier, P[best.tier + 1].burst, best.remaining, best.reset, retry, 0, 0}
