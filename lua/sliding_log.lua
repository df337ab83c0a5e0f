-- sliding_log.lua: the Redis twin of algorithms/sliding_log.go; read the
-- model there. An exact rolling window: per tier a sorted set of runs, one
-- member per logged Take, scored by its timestamp (µs); the member is
-- "<unique id>:<units>", so a Take of any cost is one member (a cost of a
-- million is not a million members) and the tier's live units are the sum
-- of the runs' units, kept in the state KEYS[1] so that a Take never sums
-- the whole set. ZREMRANGEBYSCORE drops the runs older than the window (their
-- units subtracted first), ZADD logs.
--
-- Members are unique even within one microsecond: ARGV[5] is
-- "<instance id>-<store id>-<counter>" from the Go side (per-process random
-- id, per-store atomic counter, base 36); a run cut in two by count_rejected
-- keeps its id with the units left.
--
-- KEYS[1]       state: "<t> <c_1> ... <c_n>": the latest instant seen (µs)
--               and the units in each tier (see load_state)
-- KEYS[1 + i]   sorted set of tier i's runs
-- ARGV[8..]     per tier: events, window_us
local mkey = KEYS[1]
local P = {}
for i = 1, N do
  local o = 7 + (i - 1) * 2
  P[i] = {E = tonumber(ARGV[o + 1]), W = tonumber(ARGV[o + 2]), key = KEYS[1 + i]}
end

local function units(member)
  return tonumber(string.match(member, ':(%d+)$')) or 0
end

local st, exists = load_state(mkey)
local count = {}
local t = NOW
if exists then
  if t < st[1] then t = st[1] end
  for i = 1, N do count[i] = st[i + 1] or 0 end
else
  -- No state, or only the runs survived (the state was evicted): count them.
  for i = 1, N do
    local n = 0
    for _, m in ipairs(redis.call('ZRANGE', P[i].key, 0, -1)) do n = n + units(m) end
    count[i] = n
    if n > 0 then exists = true end
  end
end

-- newest returns the timestamp of tier p's newest run, or false.
local function newest(p)
  local r = redis.call('ZRANGE', p.key, -1, -1, 'WITHSCORES')
  if #r == 2 then return tonumber(r[2]) end
  return false
end

-- save writes the latest instant and the counts and sets every key's TTL:
-- how long the newest run of any tier stays in its window (newest_ts[i],
-- looked up when nil), plus the margin.
local function save(newest_ts)
  local horizon = 0
  local v = {t}
  for i = 1, N do
    v[i + 1] = count[i]
    local ts = newest_ts and newest_ts[i]
    if ts == nil then ts = newest(P[i]) end
    if ts and ts + P[i].W - t > horizon then horizon = ts + P[i].W - t end
  end
  local ttl = save_state(mkey, v, horizon)
  for i = 1, N do redis.call('PEXPIRE', P[i].key, ttl) end
end

-- drop removes c units from tier i, newest runs first (newest = true) or
-- oldest first, cutting the last run touched.
local function drop(i, c, newest_first)
  local key = P[i].key
  while c > 0 and count[i] > 0 do
    local r
    if newest_first then
      r = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    else
      r = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    end
    if #r < 2 then break end
    local m, ts = r[1], r[2]
    local n = units(m)
    redis.call('ZREM', key, m)
    if n > c then
      local id = string.match(m, '^(.*):%d+$')
      redis.call('ZADD', key, ts, id .. ':' .. str(n - c))
      count[i] = count[i] - c
      c = 0
    else
      count[i] = count[i] - n
      c = c - n
    end
  end
end

if MODE == '1' then
  -- Undo: the cost newest units of every tier (no expiry first, as in Go).
  if not exists then return 0 end
  if COST > 0 then
    for i = 1, N do drop(i, COST, true) end
  end
  save(nil)
  return 0
end

local member = ARGV[5]

-- log adds a run of c units stamped t to tier i.
local function log(i, c)
  if c <= 0 then return end
  redis.call('ZADD', P[i].key, str(t), member .. ':' .. str(c))
  count[i] = count[i] + c
end

local ok = true
for i = 1, N do
  local p = P[i]
  local cut = str(t - p.W)
  local old = redis.call('ZRANGEBYSCORE', p.key, '-inf', cut)
  if #old > 0 then
    for _, m in ipairs(old) do count[i] = count[i] - units(m) end
    redis.call('ZREMRANGEBYSCORE', p.key, '-inf', cut)
  end
  if COST > p.E or count[i] > p.E - COST then ok = false end
end
if ok then
  for i = 1, N do log(i, COST) end
elseif COUNT_REJECTED and COST > 0 then
  -- Log the units anyway, keeping only the newest E (only they ever decide).
  for i = 1, N do
    local p = P[i]
    if COST >= p.E then
      redis.call('DEL', p.key)
      count[i] = 0
      log(i, p.E)
    else
      drop(i, count[i] - (p.E - COST), false)
      log(i, COST)
    end
  end
end

-- The newest run of each tier: t if this call logged, else looked up.
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

-- kth returns the timestamp of tier p's k-th oldest unit (1 <= k <= count),
-- reading the runs oldest first, 64 at a time.
local function kth(p, k)
  local from = 0
  while true do
    local r = redis.call('ZRANGE', p.key, from, from + 63, 'WITHSCORES')
    if #r == 0 then return t end -- unreachable while the counts are right
    for j = 1, #r, 2 do
      local n = units(r[j])
      if k <= n then return tonumber(r[j + 1]) end
      k = k - n
    end
    from = from + 64
  end
end

local pick = win_pick(ok)
for i = 1, N do
  local p = P[i]
  local reset, wait = 0, 0
  if count[i] > 0 then reset = newest_ts[i] + p.W - t end
  if not ok then
    if COST > p.E then
      wait = p.W
    elseif count[i] > p.E - COST then
      wait = kth(p, count[i] + COST - p.E) + p.W - t
    end
  end
  pick.offer(i - 1, p.E, p.E - count[i], reset, wait)
end
return pick.result()
