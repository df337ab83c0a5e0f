-- sliding_log.lua: the Redis twin of algorithms/sliding_log.go; read the
-- model there. An exact rolling window: per tier a sorted set with one
-- member per admitted unit, scored by its timestamp (µs); a tier counts the
-- units of the last window (ZREMRANGEBYSCORE drops the older ones, ZCARD
-- counts the rest, ZADD logs). Members are unique even within one
-- microsecond: ARGV[5] is "<instance id>-<store id>-<counter>" from the Go
-- side (per-process random id, per-store atomic counter, base 36), and a
-- Take of cost c logs c members ARGV[5] and "<ARGV[5]>.2" to "<...>.c"
-- (the timestamp is the score, so it need not be in the member).
--
-- KEYS[1]       string: the latest instant seen (µs)
-- KEYS[1 + i]   sorted set of tier i's units
-- ARGV[7..]     per tier: events, window_us
local mkey = KEYS[1]
local P = {}
for i = 1, N do
  local o = 6 + (i - 1) * 2
  P[i] = {E = tonumber(ARGV[o + 1]), W = tonumber(ARGV[o + 2]), key = KEYS[1 + i]}
end

local lastv = redis.call('GET', mkey)
local t = NOW
if lastv then
  local last = tonumber(lastv)
  if t < last then t = last end
end

-- newest returns the timestamp of tier p's newest unit, or nil.
local function newest(p)
  local r = redis.call('ZRANGE', p.key, -1, -1, 'WITHSCORES')
  if #r == 2 then return tonumber(r[2]) end
  return nil
end

-- save writes the latest instant and sets every key's TTL: how long the
-- newest unit of any tier stays in its window (newest_ts[i], fetched when
-- not given), plus the margin.
local function save(newest_ts)
  local horizon = 0
  for i = 1, N do
    local ts = newest_ts and newest_ts[i]
    if ts == nil then ts = newest(P[i]) end
    if ts and ts + P[i].W - t > horizon then horizon = ts + P[i].W - t end
  end
  local ttl = ttl_ms(horizon)
  redis.call('SET', mkey, str(t), 'PX', ttl)
  for i = 1, N do redis.call('PEXPIRE', P[i].key, ttl) end
end

if MODE == '1' then
  -- Undo: the cost newest units of every tier (no expiry first, as in Go).
  if not lastv then return 0 end
  for i = 1, N do redis.call('ZREMRANGEBYRANK', P[i].key, -COST, -1) end
  save()
  return 0
end

local member = ARGV[5]

-- log adds c units stamped t to tier p, at most 1000 per ZADD (unpack has
-- a limit of a few thousand values).
local function log(p, c)
  local ts = str(t)
  local j = 1
  while j <= c do
    local args = {p.key}
    local stop = math.min(c, j + 999)
    for u = j, stop do
      args[#args + 1] = ts
      if u == 1 then args[#args + 1] = member else args[#args + 1] = member .. '.' .. u end
    end
    redis.call('ZADD', unpack(args))
    j = stop + 1
  end
end

local count = {}
local ok = true
for i = 1, N do
  local p = P[i]
  redis.call('ZREMRANGEBYSCORE', p.key, '-inf', str(t - p.W))
  count[i] = redis.call('ZCARD', p.key)
  if COST > p.E or count[i] > p.E - COST then ok = false end
end
if ok then
  for i = 1, N do
    log(P[i], COST)
    count[i] = count[i] + COST
  end
elseif COUNT_REJECTED and COST > 0 then
  -- Log the units anyway, keeping only the newest E (only they ever decide).
  for i = 1, N do
    local p = P[i]
    if COST >= p.E then
      redis.call('DEL', p.key)
      log(p, p.E)
      count[i] = p.E
    else
      local excess = count[i] - (p.E - COST)
      if excess > 0 then
        redis.call('ZREMRANGEBYRANK', p.key, 0, excess - 1)
        count[i] = count[i] - excess
      end
      log(p, COST)
      count[i] = count[i] + COST
    end
  end
end
-- The newest unit of each tier: t if this call logged, else looked up.
local newest_ts = {}
local logged = COST > 0 and (ok or COUNT_REJECTED)
for i = 1, N do
  if count[i] == 0 then
    newest_ts[i] = false
  elseif logged then
    newest_ts[i] = t
  else
    newest_ts[i] = newest(P[i])
  end
end
save(newest_ts)

local pick = win_pick(ok)
for i = 1, N do
  local p = P[i]
  local reset, wait = 0, 0
  if count[i] > 0 then reset = newest_ts[i] + p.W - t end
  if not ok then
    if COST > p.E then
      wait = p.W
    elseif count[i] > p.E - COST then
      local k = count[i] + COST - p.E
      local kth = redis.call('ZRANGE', p.key, k - 1, k - 1, 'WITHSCORES')
      wait = tonumber(kth[2]) + p.W - t
    end
  end
  pick.offer(i - 1, p.E, p.E - count[i], reset, wait)
end
return pick.result()
