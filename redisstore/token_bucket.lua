-- token_bucket.lua: the Redis twin of algorithms/token_bucket.go; read the
-- integer model there. Per tier a bucket of `level` sub-units, refilled at
-- `rate` sub-units per microsecond up to `cap`; a unit is `scale` sub-units.
--
-- KEYS[1]  state: "<t> <level_1> <rate_1> <scale_1> <cap_1> ...": the
--          latest instant seen (µs), then per tier the level and the
--          constants it was saved under (see load_params)
-- ARGV[8..] per tier: rate, scale, cap, burst, window_us (from
--           algorithms.BucketParams, so both twins use the same constants)
local key = KEYS[1]
local refused, s = load_blocked(key)
if refused then return refused end
--@insert params
local SAVED = {'rate', 'scale', 'cap'}

local last, level, old, exists = load_params(s, P, SAVED, function(p) return p.cap end)

-- flow: the level lv refilled for dt µs under the constants p.
local function flow(lv, dt, p)
  local deficit = p.cap - lv
  if deficit <= 0 then return lv end
  if dt >= cdiv(deficit, p.rate) then return p.cap end
  return lv + dt * p.rate
end

-- advance: clamp now to the latest instant seen and refill to it, under
-- the constants each tier was saved under; then convert what it has
-- spent (cap - level) to the constants of this call.
--@insert bucket_advance
for i = 1, N do
  local o = old[i]
  if o ~= P[i] then level[i] = P[i].cap - bucket_convert(o.cap - level[i], o.scale, o.cap, P[i]) end
end

-- save: the state lives until every bucket is full again.
local function save()
  save_params(key, last, level, P, SAVED, function(i) return cdiv(P[i].cap - level[i], P[i].rate) end)
end

if MODE == '1' then
  return undo(exists, function(i)
    local p = P[i]
    if COST <= p.burst then
      local lv = level[i] + COST * p.scale
      if lv < p.cap then level[i] = lv else level[i] = p.cap end
    end
  end, save)
end

local allowed = true
for i = 1, N do
  if COST > P[i].burst or level[i] < COST * P[i].scale then
    allowed = false
    break
  end
end
--@insert bucket_charge_loop
    local lv = level[i] - c * p.scale
    if lv < -p.cap then lv = -p.cap end
    level[i] = lv
  end
end
save()

return blocking(bucket_result(allowed, P, function(i)
  --@insert token_tier
end, 0))
