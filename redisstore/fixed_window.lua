-- fixed_window.lua: the Redis twin of algorithms/fixed_window.go; read the
-- model there. One counter per tier for the current window, windows aligned
-- to the Unix epoch (so up to 2 x Events may pass around a boundary).
--
-- KEYS[1]  state: "<t> <s_1> <c_1> ... <s_n> <c_n>": the latest instant seen
--          (µs), then per tier the window start (µs) and the count (see
--          load_state)
-- ARGV[8..] per tier: events, window_us (P[i].E, P[i].W)
local WORDS = 2
--@insert window_head
--@insert params
local start, cur = {}, {}
for i = 1, N do
  start[i] = st[2 * i] or 0
  cur[i] = st[2 * i + 1] or 0
end

-- clamp: time never goes back.
--@insert clamp

-- save: the state lives until the end of every window holding units.
local function save()
  local v = {t}
  for i = 1, N do
    v[2 * i] = start[i]
    v[2 * i + 1] = cur[i]
  end
  save_tiers(key, v, function(i)
    if cur[i] > 0 then return start[i] + P[i].W - t end
    return 0
  end)
end

--@insert window_undo

local ok = true
for i = 1, N do
  local p = P[i]
  local ws = win_start(t, p.W)
  if ws ~= start[i] then
    start[i] = ws
    cur[i] = 0
  end
  if COST > p.E or cur[i] > p.E - COST then ok = false end
end
--@insert window_count

--@insert win_offer_loop
  if cur[i] > 0 then reset = start[i] + p.W - t end
  if not ok then
    wait = win_wait(p, cur[i], function() return start[i] + p.W - t end)
  end
  pick.offer(i - 1, p.E, p.E - cur[i], reset, wait)
end
-- Nothing comes back before the window ends.
return blocking(pick.result(function(i) return start[i] + P[i].W - t end))
