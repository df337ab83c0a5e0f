-- leaky_bucket.lua: the Redis twin of algorithms/leaky_bucket.go; read the
-- integer model there. Per tier a bucket holding `level` sub-units of water
-- that leaks at `rate` sub-units per microsecond; capacity `cap`; a unit is
-- `scale` sub-units. Delay is the time the water ahead of an admitted
-- request takes to leak.
--
-- KEYS[1]  state: "<t> <level_1> <rate_1> <scale_1> <cap_1> ...": the
--          latest instant seen (µs), then per tier the level and the
--          constants it was saved under (see load_params)
-- ARGV[8..] per tier: rate, scale, cap, burst, window_us (from
--           algorithms.BucketParams)
local key = KEYS[1]
local refused, s = load_blocked(key)
if refused then return refused end
--@insert params
local SAVED = {'rate', 'scale', 'cap'}

local last, level, old, exists = load_params(s, P, SAVED, function() return 0 end)

-- flow: the level lv leaked for dt µs under the constants p.
local function flow(lv, dt, p)
  if lv <= 0 then return 0 end
  if dt >= cdiv(lv, p.rate) then return 0 end
  return lv - dt * p.rate
end

-- advance: clamp now to the latest instant seen and leak to it, under the
-- constants each tier was saved under; then convert the level to the
-- constants of this call.
--@insert bucket_advance
for i = 1, N do
  local o = old[i]
  if o ~= P[i] then level[i] = bucket_convert(level[i], o.scale, o.cap, P[i]) end
end

-- save: the state lives until every bucket is empty.
local function save()
  save_params(key, last, level, P, SAVED, function(i) return cdiv(level[i], P[i].rate) end)
end

if MODE == '1' then
  return undo(exists, function(i)
    local p = P[i]
    if COST <= p.burst then
      local lv = level[i] - COST * p.scale
      if lv > 0 then level[i] = lv else level[i] = 0 end
    end
  end, save)
end

local allowed = true
for i = 1, N do
  if COST > P[i].burst or level[i] + COST * P[i].scale > P[i].cap then
    allowed = false
    break
  end
end
local delay = 0
--@insert bucket_charge_loop
    if allowed then
      local w = cdiv(level[i], p.rate)
      if w > delay then delay = w end
    end
    local lv = level[i] + c * p.scale
    if lv > 2 * p.cap then lv = 2 * p.cap end
    level[i] = lv
  end
end
save()

return blocking(bucket_result(allowed, P, function(i)
  local p, lv = P[i], level[i]
  local rem, wait = 0, 0
  if lv < p.cap then rem = idiv(p.cap - lv, p.scale) end
  local over = lv + COST * p.scale - p.cap
  if over > 0 then wait = cdiv(over, p.rate) end
  local more = 0
  if rem < p.burst then more = cdiv(lv - p.cap + (rem + 1) * p.scale, p.rate) end
  return rem, cdiv(lv, p.rate), wait, more
end, delay))
