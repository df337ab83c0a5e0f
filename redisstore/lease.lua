-- lease.lua: the one call of the leasing store (LeaseStore; read the model
-- and its bounds in LEASE.md). Sent after lib.lua, like the algorithms'
-- scripts, but on state of its own: a lease charges its units at the worst
-- instant at which they could be used, which the algorithms' own state
-- cannot say.
--
-- KEYS[1]  state: "<...>:ls:<digest>", integers separated by spaces (see
--          load_state): the latest instant seen (µs), then per algorithm
--            fixed_window    per tier the window start and the count
--            sliding_window  per tier the window start, the previous and
--                            the current count
--            sliding_log     runs "<stamp> <units>" shared by the tiers
--            token_bucket    per tier the level (sub-units)
--            gcra            per tier the TAT
-- KEYS[2]  the instances that leased recently: "<...>:ls:<digest>:n", a
--          hash of instance id -> the instant (µs) of its last lease
-- ARGV[1]  "0": give back, then take COST for the request and lease up
--          to `want` units more; "1": only give back; "2": peek (the
--          tiers as a take of cost 0 sees them, nothing written). Giving
--          back returns `units` unused units (maybe 0) of the lease that
--          ends at `stamp` and was granted at `granted`
-- ARGV[5]  "<alg> <instance id> <want> <lease µs> <units> <stamp> <granted>"
-- ARGV[8..] per tier: the algorithm's constants (as its own script's)
--
-- Answers, for "0": the 9 values of every script (see lib.lua) about the
-- request, then the units leased, how long the lease lasts from now (µs)
-- and its end (µs, Redis time: the stamp to give back with). For "1": 0.
-- For "2": every tier's {limit, remaining, reset_after_us}.
local ex = {}
for w in string.gmatch(ARGV[5], '%S+') do ex[#ex + 1] = w end
local ALG, ID = ex[1], ex[2]
local WANT, L = tonumber(ex[3]), tonumber(ex[4])
local UNITS, STAMP, GRANTED = tonumber(ex[5]), tonumber(ex[6]), tonumber(ex[7])

-- names: the names of each leasing algorithm's tier constants, from the
-- Go side's table of algorithms (its script reads them as P[i].<name>).
--@insert lease_params
local P = tier_params(names[ALG])
local key = KEYS[1]
local st, exists = load_state(key)
--@insert clamp

-- A give-back counts only while the instances hash holds this lease's
-- grant for this instance: a reset deletes the hash with the state, so
-- the units of a lease charged before it are never credited to the count
-- started since, where they were never charged.
if UNITS > 0 and tonumber(redis.call('HGET', KEYS[2], ID)) ~= GRANTED then UNITS = 0 end

-- share: the units leased out of `avail` lendable ones: at most WANT and
-- half of an equal share among the instances that leased within two lease
-- durations (this one included), so that a last instance finds some left.
local function share(avail)
  if WANT <= 0 or avail <= 0 then return 0 end
  redis.call('HSET', KEYS[2], ID, str(t))
  local n, all = 0, redis.call('HGETALL', KEYS[2])
  for j = 1, #all, 2 do
    if tonumber(all[j + 1]) > t - 2 * L then
      n = n + 1
    else
      redis.call('HDEL', KEYS[2], all[j])
    end
  end
  redis.call('PEXPIRE', KEYS[2], ttl_ms(2 * L))
  local k = math.floor(avail / (2 * n))
  if k > WANT then k = WANT end
  return k
end

-- gave_back is the answer of a call that only gives back ("1"), once
-- save() has written the state back.
local function gave_back(save)
  if exists then save() end
  return 0
end

-- answer: the script's answer: the request's decision r (9 values), then
-- the lease.
local function answer(r, k, x)
  if PEEK then return r end
  r[10], r[11], r[12] = k, x - t, x
  return r
end

if ALG == 'fixed_window' or ALG == 'sliding_window' then
  local sliding = ALG == 'sliding_window'
  local w = 2
  if sliding then w = 3 end
  local start, prev, cur = {}, {}, {}
  for i = 1, N do
    start[i] = st[w * (i - 1) + 2] or 0
    if sliding then prev[i] = st[3 * i] or 0 else prev[i] = 0 end
    cur[i] = st[w * i + 1] or 0
  end
  local function save()
    local v = {t}
    for i = 1, N do
      v[w * (i - 1) + 2] = start[i]
      if sliding then v[3 * i] = prev[i] end
      v[w * i + 1] = cur[i]
    end
    save_tiers(key, v, function(i)
      if cur[i] > 0 and sliding then return start[i] + 2 * P[i].W - t end
      if cur[i] > 0 or prev[i] > 0 then return start[i] + P[i].W - t end
      return 0
    end)
  end
  -- roll to t: a window that ended becomes the previous one.
  for i = 1, N do
    local ws = win_start(t, P[i].W)
    if ws ~= start[i] then
      if sliding and ws == start[i] + P[i].W then prev[i] = cur[i] else prev[i] = 0 end
      cur[i], start[i] = 0, ws
    end
  end
  -- room: the units tier i admits now, floor(E - estimate).
  local function room(i)
    local p = P[i]
    local est = cur[i]
    if sliding and prev[i] > 0 then
      est = est + math.ceil((prev[i] * (p.W - (t - start[i]))) / p.W)
    end
    return p.E - est
  end
  --@insert sliding_fits

  -- sliding_wait: how long until cost units fit sliding tier i if nothing
  -- else arrives, as sliding_window.lua's wait_of, with `lent` units of the
  -- current count left out: the units this call leased, charged as if used
  -- now, which either are among the cost waited for or come back unused
  -- (to the current or the previous window) with the lease. Counted, they
  -- would weigh on the next window as if used.
  local function sliding_wait(i, cost, lent)
    local p, c = P[i], cur[i] - lent
    if cost > p.E then return p.W end
    local e = t - start[i]
    local x = first(p, prev[i], c, e, cost)
    if x >= 0 then return x - e end
    x = first(p, c, 0, 0, cost)
    if x >= 0 then return start[i] + p.W + x - t end
    return start[i] + 2 * p.W - t
  end
  -- The units of a lease were charged to the window it ends in (a lease
  -- never outlives its window): back to it while it is the current or
  -- (sliding) the previous window.
  if UNITS > 0 and exists then
    for i = 1, N do
      local ls = win_start(STAMP - 1, P[i].W)
      if ls == start[i] then
        cur[i] = cur[i] - math.min(UNITS, cur[i])
      elseif sliding and ls == start[i] - P[i].W then
        prev[i] = prev[i] - math.min(UNITS, prev[i])
      end
    end
  end
  if MODE == '1' then return gave_back(save) end
  local ok = true
  for i = 1, N do
    if COST > P[i].E or room(i) < COST then ok = false end
  end
  local k, x = 0, t
  if ok then
    local avail, ends = nil, nil
    for i = 1, N do
      cur[i] = cur[i] + COST
      local r, e = room(i), start[i] + P[i].W
      if avail == nil or r < avail then avail = r end
      if ends == nil or e < ends then ends = e end
    end
    k = share(avail)
    for i = 1, N do cur[i] = cur[i] + k end
    x = math.min(t + L, ends)
  end
  save()
  --@insert win_offer_loop
    -- A sliding window's count weighs on the next window too.
    if sliding and cur[i] > 0 then
      reset = start[i] + 2 * p.W - t
    elseif cur[i] > 0 or prev[i] > 0 then
      reset = start[i] + p.W - t
    end
    if not ok then
      if sliding then
        wait = sliding_wait(i, COST, 0)
      else
        wait = win_wait(p, p.E - room(i), function() return start[i] + p.W - t end)
      end
    end
    pick.offer(i - 1, p.E, room(i), reset, wait)
  end
  -- MoreAfter: the wait of one unit more than the request's answer will
  -- say remain, the k leased units included (LeaseStore adds them).
  return answer(pick.result(function(i)
    local n = math.max(room(i), 0) + k + 1
    if n > P[i].E then return 0 end
    if sliding then return sliding_wait(i, n, k) end
    return start[i] + P[i].W - t
  end), k, x)
end

if ALG == 'sliding_log' then
  -- Runs of units stamped alike; a tier counts the units stamped after
  -- t - W, stamps in the future (leases) included.
  local maxW = 0
  for i = 1, N do if P[i].W > maxW then maxW = P[i].W end end
  local runs = {}
  for j = 2, #st, 2 do
    if st[j] > t - maxW and st[j + 1] > 0 then runs[#runs + 1] = {st[j], st[j + 1]} end
  end
  local function add(stamp, n)
    if n <= 0 then return end
    for _, r in ipairs(runs) do
      if r[1] == stamp then r[2] = r[2] + n; return end
    end
    runs[#runs + 1] = {stamp, n}
  end
  local function save()
    table.sort(runs, function(a, b) return a[1] < b[1] end)
    local v, last = {t}, 0
    for _, r in ipairs(runs) do
      v[#v + 1], v[#v + 2] = r[1], r[2]
      last = r[1]
    end
    save_state(key, v, last + maxW - t)
  end
  local function count(i)
    local c = 0
    for _, r in ipairs(runs) do
      if r[1] > t - P[i].W then c = c + r[2] end
    end
    return c
  end
  if UNITS > 0 then
    for _, r in ipairs(runs) do
      if r[1] == STAMP then r[2] = r[2] - math.min(UNITS, r[2]) end
    end
  end
  if MODE == '1' then return gave_back(save) end
  local ok = true
  for i = 1, N do
    if COST > P[i].E or count(i) + COST > P[i].E then ok = false end
  end
  local k, x = 0, t
  if ok then
    add(t, COST)
    local avail = nil
    for i = 1, N do
      local r = P[i].E - count(i)
      if avail == nil or r < avail then avail = r end
    end
    x = t + L
    k = share(avail)
    add(x, k)
  end
  save()
  local pick = win_pick(ok)
  for i = 1, N do
    local p, c = P[i], count(i)
    local reset, wait = 0, 0
    -- runs are sorted by save: the oldest first. A run a give-back
    -- emptied counts no unit: its end frees none.
    local newest, oldest = nil, nil
    for _, r in ipairs(runs) do
      if r[1] > t - p.W and r[2] > 0 then
        if oldest == nil then oldest = r[1] end
        newest = r[1]
      end
    end
    if newest then reset = newest + p.W - t end
    if not ok then
      wait = win_wait(p, c, function()
        local need, s = c + COST - p.E, 0
        for _, r in ipairs(runs) do
          if r[1] > t - p.W then
            s = s + r[2]
            if s >= need then return r[1] + p.W - t end
          end
        end
        return p.W
      end)
    end
    pick.offer(i - 1, p.E, p.E - c, reset, wait)
    P[i].oldest = oldest
  end
  return answer(pick.result(function(i) return (P[i].oldest or t) + P[i].W - t end), k, x)
end

-- The buckets: token_bucket in sub-units (a unit is `scale`, refilled at
-- `rate` per µs up to `cap`), gcra as a bucket of `tau` µs refilled at 1
-- per µs where a unit is `iv` µs (level = tau - (TAT - t)).
local gcra = ALG == 'gcra'
local level, last = {}, st[1] or t
for i = 1, N do
  local p = P[i]
  if gcra then
    p.rate, p.scale, p.cap = 1, p.iv, p.tau
    level[i] = p.tau - math.max((st[i + 1] or 0) - t, 0)
  else
    local lv, dt = st[i + 1] or p.cap, t - last
    if lv < p.cap then
      if dt >= cdiv(p.cap - lv, p.rate) then lv = p.cap else lv = lv + dt * p.rate end
    end
    level[i] = lv
  end
end
local function save()
  local v = {t}
  for i = 1, N do
    if gcra then v[i + 1] = t + P[i].tau - level[i] else v[i + 1] = level[i] end
  end
  save_tiers(key, v, function(i) return cdiv(P[i].cap - level[i], P[i].rate) end)
end
-- Giving back only before the lease ends: a unit lent is charged as if
-- used at the lease's last instant, and what the bucket would have refilled
-- beyond its capacity since then cannot be told apart any more.
if UNITS > 0 and exists and t < STAMP then
  for i = 1, N do
    local p = P[i]
    level[i] = math.min(p.cap, level[i] + UNITS * p.scale)
  end
end
if MODE == '1' then return gave_back(save) end
local ok = true
for i = 1, N do
  if COST > P[i].burst or level[i] < COST * P[i].scale then ok = false end
end
local k, x = 0, t
if ok then
  local avail = nil
  for i = 1, N do
    local p = P[i]
    level[i] = level[i] - COST * p.scale
    -- A unit lent now must still be in the bucket at the lease's last
    -- instant had it not been lent: lend only below cap - rate x L.
    local r = math.floor(math.min(level[i], p.cap - p.rate * L) / p.scale)
    if avail == nil or r < avail then avail = r end
  end
  x = t + L
  k = share(avail)
  if k > 0 then
    for i = 1, N do
      local p = P[i]
      level[i] = math.min(level[i], p.cap - p.rate * L) - k * p.scale
    end
  end
end
save()
local r = bucket_result(ok, P, function(i)
  --@insert token_tier
end, 0)
-- r's MoreAfter is the wait of one unit more in Redis; the k units leased
-- make up the rest of the answer's remaining only while the lease lasts
-- (after its end they are charged as used then). A wait that reaches the
-- end is the wait of them all in Redis.
if k > 0 and not PEEK and r[9] >= x - t then
  local i = r[2] + 1
  local p, n = P[i], r[4] + k + 1
  if n > p.burst then r[9] = 0 else r[9] = cdiv(n * p.scale - level[i], p.rate) end
end
return answer(r, k, x)
