-- gcra.lua: the Redis twin of algorithms/gcra.go; read the integer model
-- there. Per tier one number, the theoretical arrival time (TAT, µs).
--
-- KEYS[1]  state: "<t> <tat_1> <iv_1> <tau_1> ...": the latest instant
--          seen (µs), then per tier the TAT and the interval and tolerance
--          it was saved under (see load_params)
-- ARGV[8..] per tier: interval_us (T), tolerance_us (tau), burst, window_us
--           (from algorithms.GCRAParams): P[i].iv, tau, burst, window
local key = KEYS[1]
local refused, s = load_blocked(key)
if refused then return refused end
--@insert params
local SAVED = {'iv', 'tau'}

local last, tat, old, exists = load_params(s, P, SAVED, function() return 0 end)

-- advance: clamp now to the latest instant seen, raise every TAT to it;
-- then convert the debt, TAT - t, to the interval of this call (gcra is a
-- bucket of level TAT - t whose unit is the interval and capacity tau).
local t = NOW
if t < last then t = last end
last = t
for i = 1, N do
  if tat[i] < t then tat[i] = t end
  local p, o = P[i], old[i]
  if o ~= p then
    tat[i] = t + bucket_convert(tat[i] - t, o.iv, o.tau, {scale = p.iv, cap = p.tau, burst = p.burst})
  end
end

-- save: the state lives until every TAT is past.
local function save()
  save_params(key, last, tat, P, SAVED, function(i) return tat[i] - t end)
end

if MODE == '1' then
  return undo(exists, function(i)
    local p = P[i]
    if COST <= p.burst then
      local v = tat[i] - p.iv * COST
      if v > t then tat[i] = v else tat[i] = t end
    end
  end, save)
end

local allowed = true
for i = 1, N do
  local p = P[i]
  if COST > p.burst or t < tat[i] + p.iv * COST - p.tau then
    allowed = false
    break
  end
end
--@insert bucket_charge_loop
    local nt = tat[i] + p.iv * c
    local limit = t + 2 * p.tau
    if not allowed and nt > limit then nt = limit end
    tat[i] = nt
  end
end
save()

return blocking(bucket_result(allowed, P, function(i)
  local p = P[i]
  local ahead = tat[i] - t
  local rem, more = 0, 0
  if ahead < p.tau then rem = idiv(p.tau - ahead, p.iv) end
  if rem < p.burst then more = ahead - p.tau + p.iv * (rem + 1) end
  return rem, ahead, ahead + p.iv * COST - p.tau, more
end, 0))
