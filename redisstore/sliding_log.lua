-- sliding_log.lua: the Redis twin of algorithms/sliding_log.go; read the
-- model there. An exact rolling window: per tier a sorted set of runs, one
-- member per logged Take, whatever its cost (a cost of a million is one
-- member, not a million).
--
-- Offsets: the units ever logged into a tier are numbered 1, 2, 3, ...; C
-- (kept in the state) is the number of the newest. A run is scored by its
-- end offset (the number of its newest unit) and its member is
-- "<ts>:<units>:<unique id>". Runs are logged in time order (t never goes
-- back), so scores and timestamps grow together, and the live units are
-- the offsets (C - count, C]: every member of the set is a live run, and
-- the newest has score C. So that no call costs more than O(log n) in the
-- runs of a key, whatever the cost:
--   - the k-th oldest live unit is in the first run scored >= C - count + k
--     (one ZRANGEBYSCORE ... LIMIT 0 1);
--   - dropping the oldest units (count_rejected) or the newest (undo) is a
--     ZREMRANGEBYSCORE of the whole runs, and the one run cut in two is
--     rewritten;
--   - expiry looks at the 16 oldest runs, and bisects the ranks beyond
--     them (run timestamps grow with rank); each run is removed once;
--   - when C would pass 2^52 every score is lowered by C - count (each run
--     is rewritten at most once: all its units were logged since the last
--     time), so scores stay exact doubles.
--
-- Members are unique even within one microsecond: the id, ARGV[5], is
-- "<instance id>-<store id>-<counter>" from the Go side (per-process random
-- id, per-store atomic counter, base 36).
--
-- KEYS[1]       state: "<t> <count_1> <C_1> ... <count_n> <C_n>": the
--               latest instant seen (µs), per tier the live units and the
--               newest offset (see load_state)
-- KEYS[1 + i]   sorted set of tier i's runs
-- ARGV[8..]     per tier: events, window_us (P[i].E, P[i].W)
local mkey = KEYS[1]
local refused, s = load_blocked(mkey)
if refused then return refused end
--@insert params

-- REBASE bounds the offsets: a run's end plus a cost (at most 2^51) stays
-- below 2^53.
local REBASE = 4503599627370496 -- 2^52

-- run returns a member's timestamp, units and id.
local function run(m)
  local ts, n, id = string.match(m, '^(%d+):(%d+):(.*)$')
  return tonumber(ts), tonumber(n), id
end

local function member(ts, n, id)
  return str(ts) .. ':' .. str(n) .. ':' .. id
end

local st, exists = state_of(s, 1 + 2 * N)
local count, C = {}, {}
local t = NOW
if exists then
  if t < st[1] then t = st[1] end
  for i = 1, N do
    count[i] = st[2 * i] or 0
    C[i] = st[2 * i + 1] or 0
    -- A tier added since the state was saved starts empty, whatever a
    -- tier of that index left behind when it was removed.
    if st[2 * i + 1] == nil then redis.call('DEL', KEYS[1 + i]) end
  end
else
  -- No state, or only the runs survived (the state was evicted): the live
  -- units run from the oldest run's first to the newest run's end.
  for i = 1, N do
    count[i], C[i] = 0, 0
    local first = redis.call('ZRANGE', KEYS[1 + i], 0, 0, 'WITHSCORES')
    if #first == 2 then
      local last = redis.call('ZRANGE', KEYS[1 + i], -1, -1, 'WITHSCORES')
      local _, n = run(first[1])
      C[i] = tonumber(last[2])
      count[i] = C[i] - (tonumber(first[2]) - n)
      exists = true
    end
  end
end

-- newest returns the timestamp of tier i's newest run, or false.
local function newest(i)
  local r = redis.call('ZRANGE', KEYS[1 + i], -1, -1)
  if #r == 1 then return (run(r[1])) end
  return false
end

-- save writes the latest instant, the counts and offsets, and sets every
-- key's TTL: how long the newest run of any tier stays in its window
-- (newest_ts[i], looked up when nil), plus the margin.
local function save(newest_ts)
  local horizon = 0
  local v = {t}
  for i = 1, N do
    if count[i] <= 0 then count[i], C[i] = 0, 0 end -- the set is empty
    v[2 * i] = count[i]
    v[2 * i + 1] = C[i]
    local ts = newest_ts and newest_ts[i]
    if ts == nil then ts = newest(i) end
    if ts and ts + P[i].W - t > horizon then horizon = ts + P[i].W - t end
  end
  local ttl = save_state(mkey, v, horizon)
  if PEEK then return end
  for i = 1, N do redis.call('PEXPIRE', KEYS[1 + i], ttl) end
end

-- cut_oldest rewrites tier i's oldest run when some of its units are no
-- longer live (count_rejected dropped them).
local function cut_oldest(i)
  if count[i] <= 0 then return end
  local r = redis.call('ZRANGE', KEYS[1 + i], 0, 0, 'WITHSCORES')
  if #r < 2 then return end
  local ts, n, id = run(r[1])
  local live = tonumber(r[2]) - (C[i] - count[i])
  if live < n then
    redis.call('ZREM', KEYS[1 + i], r[1])
    redis.call('ZADD', KEYS[1 + i], r[2], member(ts, live, id))
  end
end

-- drop_newest removes the c newest units of tier i: the runs scored above
-- C - c, the oldest of them cut back to end there if it starts below.
local function drop_newest(i, c)
  if c > count[i] then c = count[i] end
  if c <= 0 then return end
  local key = KEYS[1 + i]
  local top = C[i] - c
  local above = '(' .. str(top)
  local r = redis.call('ZRANGEBYSCORE', key, above, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  redis.call('ZREMRANGEBYSCORE', key, above, '+inf')
  count[i], C[i] = count[i] - c, top
  if #r == 2 and count[i] > 0 then
    local ts, n, id = run(r[1])
    local from = tonumber(r[2]) - n -- the offset before the run's first unit
    if from < top then redis.call('ZADD', key, str(top), member(ts, top - from, id)) end
  end
end

-- drop_oldest removes the c oldest units of tier i.
local function drop_oldest(i, c)
  if c > count[i] then c = count[i] end
  if c <= 0 then return end
  count[i] = count[i] - c
  redis.call('ZREMRANGEBYSCORE', KEYS[1 + i], '-inf', str(C[i] - count[i]))
  cut_oldest(i)
end

-- expire drops tier i's runs stamped t - W or earlier.
local function expire(i)
  if count[i] <= 0 then return end
  local p = P[i]
  local key = KEYS[1 + i]
  local cut = t - p.W
  local r = redis.call('ZRANGE', key, 0, 15, 'WITHSCORES')
  if #r == 0 then
    count[i] = 0 -- the runs were lost (evicted): nothing left to count
    return
  end
  local k, score = 0, nil -- runs expired, the score of the newest of them
  while 2 * k < #r and run(r[2 * k + 1]) <= cut do
    score = r[2 * k + 2]
    k = k + 1
  end
  if k == 16 then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if run(last[1]) <= cut then
      if not PEEK then redis.call('DEL', key) end
      count[i] = 0
      return
    end
    -- Bisect the ranks: lo expired, hi not (at most log2(n) rounds).
    local lo, hi = 15, redis.call('ZCARD', key) - 1
    while hi - lo > 1 do
      local m = lo + idiv(hi - lo, 2)
      local x = redis.call('ZRANGE', key, m, m, 'WITHSCORES')
      if run(x[1]) <= cut then lo, score = m, x[2] else hi = m end
    end
    k = lo + 1
  end
  if k > 0 then
    if not PEEK then redis.call('ZREMRANGEBYRANK', key, 0, k - 1) end
    count[i] = C[i] - tonumber(score)
  end
end

-- rebase lowers every score of tier i by C - count, so that C = count.
local function rebase(i)
  local key = KEYS[1 + i]
  local base = C[i] - count[i]
  local n = redis.call('ZCARD', key)
  for from = 0, n - 1, 128 do
    local r = redis.call('ZRANGE', key, from, from + 127, 'WITHSCORES')
    local args = {}
    for j = 1, #r, 2 do
      args[j] = str(tonumber(r[j + 1]) - base)
      args[j + 1] = r[j]
    end
    if #args > 0 then redis.call('ZADD', key, 'XX', unpack(args)) end
  end
  C[i] = count[i]
end

if MODE == '1' then
  -- Undo: the cost newest units of every tier (no expiry first, as in Go).
  if not exists then return 0 end
  if COST > 0 then
    for i = 1, N do drop_newest(i, COST) end
  end
  save(nil)
  return 0
end

local id = ARGV[5]

-- log adds a run of c units stamped t to tier i.
local function log(i, c)
  if c <= 0 then return end
  if C[i] + c > REBASE then rebase(i) end
  C[i], count[i] = C[i] + c, count[i] + c
  redis.call('ZADD', KEYS[1 + i], str(C[i]), member(t, c, id))
end

local ok = true
for i = 1, N do
  local p = P[i]
  expire(i)
  if COST > p.E or count[i] > p.E - COST then ok = false end
end
if ok then
  for i = 1, N do log(i, COST) end
elseif COUNT_REJECTED and COST > 0 then
  -- Log the units anyway, keeping only the newest E (only they ever decide).
  for i = 1, N do
    local p = P[i]
    if COST >= p.E then
      redis.call('DEL', KEYS[1 + i])
      count[i], C[i] = 0, 0
      log(i, p.E)
    else
      drop_oldest(i, count[i] - (p.E - COST))
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
    newest_ts[i] = newest(i)
  end
end
save(newest_ts)

-- kth returns the timestamp of tier i's k-th oldest live unit
-- (1 <= k <= count): the first run ending at or after its offset.
local function kth(i, k)
  local r = redis.call('ZRANGEBYSCORE', KEYS[1 + i], str(C[i] - count[i] + k), '+inf', 'LIMIT', 0, 1)
  if #r == 0 then return t end -- unreachable while the counts are right
  return (run(r[1]))
end

--@insert win_offer_loop
  if count[i] > 0 then reset = newest_ts[i] + p.W - t end
  if not ok then
    wait = win_wait(p, count[i], function() return kth(i, count[i] + COST - p.E) + p.W - t end)
  end
  pick.offer(i - 1, p.E, p.E - count[i], reset, wait)
end
-- One more unit is free when the oldest leaves the window.
return blocking(pick.result(function(i) return kth(i, 1) + P[i].W - t end))
