-- gcra.lua: the Redis twin of algorithms/gcra.go; read the integer model
-- there. Per tier one number, the theoretical arrival time (TAT, µs).
--
-- KEYS[1]  state: "<t> <tat_1> ... <tat_n>": the latest instant seen (µs)
--          and the TAT per tier (see load_state)
-- ARGV[8..] per tier: interval_us (T), tolerance_us (tau), burst, window_us
--           (from algorithms.GCRAParams)
local key = KEYS[1]
local P = {}
for i = 1, N do
  local o = 7 + (i - 1) * 4
  P[i] = {iv = tonumber(ARGV[o + 1]), tau = tonumber(ARGV[o + 2]), burst = tonumber(ARGV[o + 3]),
          window = tonumber(ARGV[o + 4])}
end

local st, exists = load_state(key)
local last = st[1] or 0
local tat = {}
for i = 1, N do
  tat[i] = st[i + 1] or 0
end

-- advance: clamp now to the latest instant seen, raise every TAT to it.
local t = NOW
if t < last then t = last end
last = t
for i = 1, N do
  if tat[i] < t then tat[i] = t end
end

local function save()
  local v = {last}
  local horizon = 0
  for i = 1, N do
    v[i + 1] = tat[i]
    if tat[i] - t > horizon then horizon = tat[i] - t end
  end
  save_state(key, v, horizon)
end

if MODE == '1' then
  if not exists then return 0 end
  for i = 1, N do
    local p = P[i]
    if COST <= p.burst then
      local v = tat[i] - p.iv * COST
      if v > t then tat[i] = v else tat[i] = t end
    end
  end
  save()
  return 0
end

local allowed = true
for i = 1, N do
  local p = P[i]
  if COST > p.burst or t < tat[i] + p.iv * COST - p.tau then
    allowed = false
    break
  end
end
if allowed or COUNT_REJECTED then
  for i = 1, N do
    local p = P[i]
    local c = COST
    if c > 2 * p.burst then c = 2 * p.burst end -- the clamp below gives the same TAT
    local nt = tat[i] + p.iv * c
    local limit = t + 2 * p.tau
    if not allowed and nt > limit then nt = limit end
    tat[i] = nt
  end
end
save()

local best = nil
for i = 1, N do
  local p = P[i]
  local ahead = tat[i] - t
  local v = {tier = i - 1, remaining = 0, reset = ahead, wait = 0, impossible = false}
  if ahead < p.tau then v.remaining = idiv(p.tau - ahead, p.iv) end
  if allowed then
    if better_allowed(v, best) then best = v end
  else
    if COST > p.burst then
      v.impossible = true
      v.wait = p.window
    else
      local w = ahead + p.iv * COST - p.tau
      if w > 0 then v.wait = w end
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
