-- concurrency.lua: the Redis twin of algorithms/concurrency.go; read the
-- model there. At most `events` units in flight per key, each admitted
-- request holding a lease that expires after `window` on its own (a crashed
-- instance never blocks a key for longer than that).
--
-- The caller makes a lease's token (unique across instances, below 2^53),
-- not the script: a take whose answer was lost (a Redis slower than the
-- caller's timeout) may still run here later, and its caller can then give
-- back, by that token, a lease it never saw. That give-back (a forget)
-- leaves a tombstone when it comes first (for 5 minutes at most), which
-- the late take consumes instead of taking a slot.
--
-- KEYS[1]  hash: t = latest instant seen (µs), k = last token drawn here
--          (by versions that drew them; kept for them), h = units held,
--          x = expiry of the newest tombstone (µs; absent: none)
-- KEYS[2]  sorted set: a lease is member "<token>:<cost>" scored by its
--          expiry (µs); a tombstone "f<token>" scored by its own (cost 0)
-- ARGV[1]  "0" take, "1" undo (a release), "2" peek, "3" forget (a release
--          of a take whose answer was lost: a tombstone if it has not run)
-- ARGV[5]  the lease's token: the take's new one, or the one to give back
-- ARGV[8], ARGV[9]  events, window_us (exactly one tier): P[1].E, P[1].W
local refused = blocked()
if refused then return refused end
local hkey, zkey = KEYS[1], KEYS[2]
--@insert params
local events, window = P[1].E, P[1].W

local function lease_cost(member)
  local c = string.match(member, ':(%d+)$')
  return tonumber(c) or 0
end

local st = redis.call('HMGET', hkey, 't', 'k', 'h', 'x')
local exists = st[1] ~= false
local last, last_token, held, tomb = 0, 0, 0, 0
if exists then
  last, last_token, held = tonumber(st[1]), tonumber(st[2]) or 0, tonumber(st[3]) or 0
  tomb = tonumber(st[4]) or 0
elseif redis.call('EXISTS', zkey) == 1 then
  -- The hash is gone but leases remain (evicted): rebuild it from them.
  local all = redis.call('ZRANGE', zkey, 0, -1)
  for _, m in ipairs(all) do
    held = held + lease_cost(m)
    local tok = tonumber(string.match(m, '^(%d+):'))
    -- k only for the versions that drew tokens here (time-like, below 2^52)
    if tok and tok > last_token and tok < 4503599627370496 then last_token = tok end
    if string.sub(m, 1, 1) == 'f' then tomb = NOW + window end -- at most that late
  end
  exists = true
end

-- advance: clamp now to the latest instant seen, drop the expired leases.
local t = NOW
if t < last then t = last end
last = t
local expired = redis.call('ZRANGEBYSCORE', zkey, '-inf', str(t))
if #expired > 0 then
  for _, m in ipairs(expired) do held = held - lease_cost(m) end
  if not PEEK then redis.call('ZREMRANGEBYSCORE', zkey, '-inf', str(t)) end
end

local function save()
  local horizon = 0
  local newest = redis.call('ZRANGE', zkey, -1, -1, 'WITHSCORES')
  if #newest == 2 then horizon = math.max(tonumber(newest[2]) - t, 0) end
  if PEEK then return horizon end
  if tomb > t then
    redis.call('HSET', hkey, 't', str(last), 'k', str(last_token), 'h', str(held), 'x', str(tomb))
  else
    redis.call('HSET', hkey, 't', str(last), 'k', str(last_token), 'h', str(held))
  end
  local ttl = ttl_ms(horizon)
  redis.call('PEXPIRE', hkey, ttl)
  redis.call('PEXPIRE', zkey, ttl)
  return horizon
end

-- release removes the lease of ARGV[5] taken at cost ARGV[3] and reports
-- whether there was one.
local function release()
  if redis.call('ZREM', zkey, ARGV[5] .. ':' .. ARGV[3]) == 1 then
    held = held - COST
    return true
  end
  return false
end

if MODE == '1' then
  if not exists then return 0 end
  if not release() then
    -- Released with another cost than taken: find the lease by its token.
    local prefix = ARGV[5] .. ':'
    for _, m in ipairs(redis.call('ZRANGE', zkey, 0, -1)) do
      if string.sub(m, 1, #prefix) == prefix then
        redis.call('ZREM', zkey, m)
        held = held - lease_cost(m)
        break
      end
    end
  end
  save()
  return 0
end

if MODE == '3' then
  -- The take's own cost: its lease is exactly this member if it ran.
  if not release() then
    -- The take has not run (or never will: most often it was never
    -- sent): a tombstone it consumes. A take still on its way comes soon
    -- after the forget (both wait on the same Redis, or network), so the
    -- tombstone lives as long as its lease would, but 5 minutes at most.
    local ends = t + math.min(window, 300000000)
    redis.call('ZADD', zkey, str(ends), 'f' .. ARGV[5])
    if ends > tomb then tomb = ends end
  end
  save()
  return 0
end

local allowed, token, retry = 0, 0, 0
if COST > 0 and tomb > t and redis.call('ZREM', zkey, 'f' .. ARGV[5]) == 1 then
  -- Forgotten before it ran: its caller has had its answer (an error)
  -- and nobody reads this one. Nothing is taken.
  save()
  return {0, 0, events, 0, 0, 0, 0, 0, 0}
end
if COST <= events and held + COST <= events then
  allowed = 1
  if COST > 0 then
    token = ARGV[5] + 0
    redis.call('ZADD', zkey, str(t + window), ARGV[5] .. ':' .. str(COST))
    held = held + COST
  end
elseif COST > events then
  retry = window
else
  -- The oldest lease whose expiry frees enough units (at most a second:
  -- requests usually end long before their lease expires), among the 64
  -- oldest only (ccMaxScan), so that a denial costs O(log n).
  local free = events - held
  local wait = 1000000
  local need = COST - free -- >= 1; every lease holds at least one unit
  if need > 64 then need = 64 end
  local leases = redis.call('ZRANGE', zkey, 0, need - 1, 'WITHSCORES')
  for j = 1, #leases, 2 do
    free = free + lease_cost(leases[j])
    if free >= COST then
      local w = tonumber(leases[j + 1]) - t
      if w < wait then wait = w end
      break
    end
  end
  if wait < 1 then wait = 1 end
  retry = wait
end
local reset = save()
if PEEK then return {events, events - held, reset} end
-- more: when the oldest lease expires, at most a second (as retry).
local more = 0
local oldest = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
if #oldest == 2 then
  more = tonumber(oldest[2]) - t
  if more > 1000000 then more = 1000000 end
  if more < 1 then more = 1 end
end
-- held may exceed events after the limit was lowered.
local remaining = events - held
if remaining < 0 then remaining = 0 end
return blocking({allowed, 0, events, remaining, reset, retry, 0, token, more})
