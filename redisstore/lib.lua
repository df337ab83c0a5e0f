-- lib.lua: helpers shared by every script of caddy-ratelimit. The Go side
-- sends each script as lib.lua followed by the algorithm's file, so a script
-- is one EVALSHA.
--
-- Common arguments of every script:
--   ARGV[1] mode: "0" take, "1" undo, "2" peek (cost 0, nothing written)
--   ARGV[2] now in microseconds since the epoch; "" (or "0") means read
--           Redis TIME here. Calling TIME in a script that writes is allowed:
--           Redis 7 replicates a script's effects (its writes), never the
--           script itself (redis.replicate_commands below does the same on
--           Redis 3.2-4 and is a no-op since 5).
--   ARGV[3] cost (units; negative counts as 0)
--   ARGV[4] count_rejected: "1" or "0"
--   ARGV[5] a unique member (sliding_log) or the token to undo (concurrency)
--   ARGV[6] the TTL margin in milliseconds (added to every key's TTL)
--   ARGV[7] n, the number of tiers, then per tier the algorithm's constants
--   ARGV[#ARGV] block_for in microseconds (0: a denial blocks nothing)
--   KEYS[#KEYS] the key's block (see the end of this file), after the
--               algorithm's keys
-- Every script answers {allowed (1/0), tier (0-based), limit, remaining,
-- reset_after_us, retry_after_us, delay_us, token, more_after_us}, 0 for
-- an undo, and for a peek every tier's {limit, remaining, reset_after_us}
-- one after the other; a take that leaves the key blocked answers a tenth
-- value, 1, and a limit of 0 when the block refused it before the
-- algorithm's body.
--
-- Arithmetic: all values are integers below 2^53, exact in Lua's doubles.
-- Lua 5.1 has no integer division: idiv truncates toward zero as Go's / does
-- (math.fmod is exact), cdiv is the Go twins' ceiling (a+b-1)/b. Decimal
-- strings that are always integers (ARGV, TIME's answer, a state's words)
-- are read with s + 0, Lua's own coercion: the number tonumber(s) gives, at
-- half the cost (tonumber is a C function call that parses s twice).
if redis.replicate_commands then redis.replicate_commands() end

local function idiv(a, b)
  return (a - math.fmod(a, b)) / b
end

local function cdiv(a, b)
  if a >= 0 then
    local r = math.fmod(a, b)
    local q = (a - r) / b
    if r > 0 then q = q + 1 end
    return q
  end
  return idiv(a + b - 1, b)
end

local function now_us(arg)
  if arg == nil or arg == '' or arg == '0' then
    local t = redis.call('TIME')
    return t[1] * 1000000 + t[2]
  end
  return arg + 0
end

-- str formats an integer for Redis without an exponent (tostring would
-- write 1.7e+15).
local function str(x)
  return string.format('%d', x)
end

local MODE = ARGV[1]
local NOW = now_us(ARGV[2])
local COST = ARGV[3] + 0
if COST < 0 then COST = 0 end
local COUNT_REJECTED = ARGV[4] == '1'
local MARGIN_MS = ARGV[6] + 0
local N = ARGV[7] + 0

-- A peek runs the take of cost 0 with every write left out (save_state,
-- and the scripts' own writes check PEEK): the operator's look at a key
-- changes nothing. peek_tier collects its answer (a table made only for a
-- peek).
local PEEK = MODE == '2'
if PEEK then COST = 0 end
local peeked = PEEK and {} or nil
local function peek_tier(limit, rem, reset)
  if rem < 0 then rem = 0 end
  local n = #peeked
  peeked[n + 1], peeked[n + 2], peeked[n + 3] = limit, rem, reset
end

-- ttl_ms is the PEXPIRE of a state that needs us more microseconds: rounded
-- up to milliseconds plus the margin (ARGV[6]), as a decimal string.
local function ttl_ms(us)
  if us < 0 then us = 0 end
  return str(cdiv(us, 1000) + MARGIN_MS)
end

-- State keys. The state of gcra, the buckets, the window counters and the
-- sliding log's counts is one string key holding decimal integers separated
-- by spaces: it is read with one GET (with the key's block: one MGET, see
-- load_blocked) and written, with its TTL, by one SET PX. Each redis.call
-- costs Redis 3,000-10,000 instructions, and a hash would need HMGET, HSET
-- and PEXPIRE.
--
-- words returns the words of a state s in a table: its first k with one
-- string.match when s has them (each followed by a space, as save_state
-- writes them: the usual case), else all of them, a gmatch step each (a
-- tier added since s was saved, a state of runs), which costs Redis twice
-- as much. A pattern holds at most 32 captures.
local function words(s, k)
  local v
  if k > 0 and k <= 32 then v = {string.match(s, string.rep('(%S+) ', k))} end
  if v == nil or v[1] == nil then
    local n = 0
    v = {}
    for w in string.gmatch(s, '%S+') do
      n = n + 1
      v[n] = w
    end
  end
  return v
end

-- state_of returns the integers of a state s (k words when it holds every
-- tier, see words) and true, or an empty table and false when the key does
-- not exist (s is false).
local function state_of(s, k)
  if not s then return {}, false end
  local v = words(s, k)
  for j = 1, #v do v[j] = v[j] + 0 end
  return v, true
end

-- load_state is state_of the string key holds, of any length.
local function load_state(key)
  return state_of(redis.call('GET', key), 0)
end

-- save_state writes the integers of v to key, to expire in us microseconds
-- (see ttl_ms), and returns that TTL for the script's other keys.
local function save_state(key, v, us)
  local ttl = ttl_ms(us)
  if PEEK then return ttl end
  redis.call('SET', key, string.format(string.rep('%d ', #v), unpack(v)), 'PX', ttl)
  return ttl
end

-- pick: the tier a Decision describes. Denied: one whose cost can never
-- pass first, then the longest wait; allowed: the fewest remaining, then
-- the longest MoreAfter (a shorter one would be early for that many);
-- other ties go to the lowest index (the first seen).
local function better_denied(a, b)
  if b == nil then return true end
  if a.impossible ~= b.impossible then return a.impossible end
  return a.wait > b.wait
end

local function better_allowed(a, b)
  return b == nil or a.remaining < b.remaining or a.remaining == b.remaining and a.more > b.more
end

-- fmod: a mod b rounded toward minus infinity (b > 0), exact.
local function fmod(a, b)
  local m = math.fmod(a, b)
  if m < 0 then m = m + b end
  return m
end

-- win_pick: the tier a Decision of sliding_log, sliding_window or
-- fixed_window describes: allowed, the fewest remaining, then the longest
-- MoreAfter; denied, the longest wait; other ties go to the lowest index.
-- RetryAfter is that wait. result(more) calls more(i) for the MoreAfter
-- (µs) of the tier picked (1-based i) when it is not whole, and only for
-- it and the tiers tied with it (it may cost a Redis call).
local function win_pick(allowed)
  local p = {set = false, ties = {}}
  function p.offer(i, limit, rem, reset, wait)
    if rem < 0 then rem = 0 end
    if PEEK then peek_tier(limit, rem, reset) end
    if p.set then
      if allowed and rem == p.rem then
        p.ties[#p.ties + 1] = {i, limit, reset}
        return
      end
      if allowed and rem > p.rem or (not allowed) and wait <= p.wait then return end
    end
    p.set, p.tier, p.limit, p.rem, p.reset, p.wait, p.ties = true, i, limit, rem, reset, wait, {}
  end
  function p.result(more)
    if PEEK then return peeked end
    local retry, m = 0, 0
    if not allowed then retry = p.wait end
    if p.rem < p.limit then m = more(p.tier + 1) end
    for _, x in ipairs(p.ties) do
      local mx = 0
      if p.rem < x[2] then mx = more(x[1] + 1) end
      if mx > m then p.tier, p.limit, p.reset, m = x[1], x[2], x[3], mx end
    end
    return {allowed and 1 or 0, p.tier, p.limit, p.rem, p.reset, retry, 0, 0, m}
  end
  return p
end

-- tier_params returns, per tier, a table of the named constants ARGV[8..]
-- holds for it (names lists them in order; the same number per tier). The
-- algorithms' own scripts build each tier's table with one constructor
-- instead (the snippet params, written from the table of algorithms in
-- algorithms.go): sized once, where a table filled a field at a time is
-- grown up to three times.
local function tier_params(names)
  local P, w = {}, #names
  for i = 1, N do
    local o, p = 7 + (i - 1) * w, {}
    for j = 1, w do p[names[j]] = ARGV[o + j] + 0 end
    P[i] = p
  end
  return P
end

-- undo ends the script in undo mode: when the state exists, give(i) gives
-- back in every tier, then save() writes the state. It answers 0.
local function undo(exists, give, save)
  if exists then
    for i = 1, N do give(i) end
    save()
  end
  return 0
end

-- save_tiers writes the integers of v to key (save_state) with the TTL the
-- longest-lived tier needs: the largest us(i) microseconds, at least 0.
local function save_tiers(key, v, us)
  local horizon = 0
  for i = 1, N do
    local h = us(i)
    if h > horizon then horizon = h end
  end
  return save_state(key, v, horizon)
end

-- load_params reads s, the state of gcra and the buckets, "<t> <level_1>
-- <c_1> ... <level_n> <c_n>": the latest instant seen (µs), then per tier
-- its level and the constants it was saved under (the names of P[i] that
-- names lists, the first of the tier's ARGV), so that a level saved under
-- other limits is converted. It returns the instant, the levels, the
-- constants per tier and whether the state exists; a tier without state (a
-- new key, an added tier) gets fresh(P[i]) and the constants of P[i]. A
-- tier saved under this call's constants, the usual case, gets P[i] itself
-- (the scripts convert only when old[i] ~= P[i]): its constants' text is
-- compared with the ARGV's (interned strings: one comparison each) instead
-- of being read as numbers.
local function load_params(s, P, names, fresh)
  local w, a = 1 + #names, (#ARGV - 8) / N
  local st = s and words(s, 1 + w * N) or {}
  local exists = st[1] ~= nil
  local level, old = {}, {}
  for i = 1, N do
    local o = 1 + w * (i - 1)
    if st[o + w] ~= nil then
      level[i] = st[o + 1] + 0
      local b, q = 7 + a * (i - 1), P[i]
      for j = 1, #names do
        if st[o + 1 + j] ~= ARGV[b + j] then q = nil break end
      end
      if not q then
        q = {}
        for j = 1, #names do q[names[j]] = st[o + 1 + j] + 0 end
      end
      old[i] = q
    else
      level[i], old[i] = fresh(P[i]), P[i]
    end
  end
  return exists and st[1] + 0 or 0, level, old, exists
end

-- save_params writes what load_params reads, with the constants of P, to
-- live the largest us(i) microseconds (save_tiers).
local function save_params(key, last, level, P, names, us)
  local v, n = {last}, 1
  for i = 1, N do
    n = n + 1
    v[n] = level[i]
    for j = 1, #names do
      n = n + 1
      v[n] = P[i][names[j]]
    end
  end
  return save_tiers(key, v, us)
end

local function gcd(a, b)
  while b ~= 0 do a, b = b, math.fmod(a, b) end
  return a
end

-- bucket_convert is a level (>= 0) of sub-units of oscale, in a bucket of
-- ocap, in those of a bucket of n (scale, cap, burst), as bktConvert in
-- algorithms/bucket.go: exact while the scales reduced by their gcd have a
-- product below 2^53, else in whole units rounded up; at most n.cap when
-- the constants differ.
local function bucket_convert(level, oscale, ocap, n)
  if oscale == n.scale and ocap == n.cap then return level end
  if oscale ~= n.scale then
    local g = gcd(oscale, n.scale)
    local a, b = n.scale / g, oscale / g
    if a * b < 9007199254740992 then
      local r = math.fmod(level, b)
      local q = (level - r) / b
      if q > idiv(n.cap, a) then return n.cap end
      level = q * a + cdiv(r * a, b)
    else
      local u = cdiv(level, oscale)
      if u > n.burst then u = n.burst end
      level = u * n.scale
    end
  end
  if level > n.cap then return n.cap end
  return level
end

-- bucket_result is the answer of gcra and the buckets (P[i] with burst and
-- window): the tier picked by better_allowed or better_denied, where
-- tier(i) returns tier i's remaining, reset, wait (denied within its burst)
-- and more (the wait of remaining+1 units, 0 when whole), in µs. A denied
-- request waits at least 1µs.
local function bucket_result(allowed, P, tier, delay)
  local best = nil
  for i = 1, N do
    local p = P[i]
    local rem, reset, wait, more = tier(i)
    local v = {tier = i - 1, remaining = rem, reset = reset, more = more, wait = 0, impossible = false}
    if PEEK then peek_tier(p.burst, rem, reset) end
    if allowed then
      if better_allowed(v, best) then best = v end
    else
      if COST > p.burst then
        v.impossible = true
        v.wait = p.window
      elseif wait > 0 then
        v.wait = wait
      end
      if better_denied(v, best) then best = v end
    end
  end
  if PEEK then return peeked end
  local retry = 0
  if not allowed then
    retry = best.wait
    if retry <= 0 then retry = 1 end
  end
  return {allowed and 1 or 0, best.tier, P[best.tier + 1].burst, best.remaining, best.reset, retry, delay, 0, best.more}
end

-- win_start is the start of the window of W µs holding t (windows aligned
-- to the Unix epoch).
local function win_start(t, W)
  return t - fmod(t, W)
end

-- add_capped is count + COST, at most E: what a denied request adds with
-- count_rejected (any count at E refuses everything).
local function add_capped(count, E)
  if COST >= E - count then return E end
  return count + COST
end

-- win_wait is how long a request of COST, denied, waits for a tier of E
-- events per W µs holding count units: a whole window when it can never
-- pass, free() (when enough units leave) when the count refuses it, else 0.
local function win_wait(p, count, free)
  if COST > p.E then return p.W end
  if count > p.E - COST then return free() end
  return 0
end

-- Blocks (block_for, and an operator's block). KEYS[#KEYS],
-- "<prefix><zone>:{<key>}:b", holds the instant (µs) the key's block ends,
-- with a PX TTL to match; it has no config digest, so a block outlives a
-- change of the zone's limits. A take while it lasts is refused (see
-- blocked) before the algorithm's body: nothing is counted, and the block
-- is not extended.
local BLOCK_KEY = KEYS[#KEYS]
local BLOCK_FOR = ARGV[#ARGV] + 0

-- blocking returns r, the answer of a take: when r denies and the zone has
-- block_for, the key is blocked from now for that long, and r waits at
-- least until the block ends.
local function blocking(r)
  if MODE == '0' and r[1] == 0 and BLOCK_FOR > 0 then
    redis.call('SET', BLOCK_KEY, str(NOW + BLOCK_FOR), 'PX', str(cdiv(BLOCK_FOR, 1000)))
    for _, j in ipairs({5, 6, 9}) do
      if r[j] < BLOCK_FOR then r[j] = BLOCK_FOR end
    end
    r[10] = 1
  end
  return r
end

-- refusal returns the answer of a take refused by a block that ends at
-- `ends` (the block key's value, false when there is none: the usual case,
-- decided before any tonumber), or nil.
local function refusal(ends)
  if not ends then return nil end
  ends = tonumber(ends) or 0
  if ends > NOW then
    local left = ends - NOW
    return {0, 0, 0, 0, left, left, 0, 0, left, 1}
  end
  return nil
end

-- blocked returns the answer of a take refused by the key's block, or
-- nil. Every algorithm's script calls it, or load_blocked, first: while the
-- block lasts the algorithm's body does not run.
local function blocked()
  if MODE ~= '0' then return nil end
  return refusal(redis.call('GET', BLOCK_KEY))
end

-- load_blocked reads a state key and the key's block with one MGET (both
-- hold the key's hash tag: one slot in a Cluster) and returns what blocked
-- returns, then the state's string (false when the key does not exist).
local function load_blocked(key)
  local r = redis.call('MGET', key, BLOCK_KEY)
  if MODE ~= '0' then return nil, r[1] end
  return refusal(r[2]), r[1]
end
