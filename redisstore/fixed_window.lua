-- fixed_window.lua: the Redis twin of algorithms/fixed_window.go; read the
-- model there. One counter per tier for the current window, windows aligned
-- to the Unix epoch (so up to 2 x Events may pass around a boundary).
--
-- KEYS[1]  state: "<t> <s_1> <c_1> ... <s_n> <c_n>": the latest instant seen
--          (µs), then per tier the window start (µs) and the count (see
--          tier_cols)
-- ARGV[8..] per tier: events, window_us
local refused = blocked()
if refused then return refused end
local key = KEYS[1]
local P, t, S, exists = win_load(key, 2)
local start, count = S[1], S[2]

-- ends: how long until tier i's window ends; nothing comes back before.
local function ends(i)
  return start[i] + P[i].W - t
end

-- save: the state lives until the end of every window holding units.
local function save()
  save_cols(key, t, S, function(i)
    if count[i] > 0 then return ends(i) end
    return 0
  end)
end

if MODE == '1' then return win_undo(exists, t, P, start, count, save) end

win_roll(t, P, start, count)
local ok = true
for i = 1, N do
  if COST > P[i].E or count[i] > P[i].E - COST then ok = false end
end
win_add(ok, P, count)
save()

return blocking(win_result(ok, P, function(i, p)
  if count[i] > 0 then return p.E - count[i], ends(i) end
  return p.E, 0
end, function(i, p)
  return win_wait(p, count[i], function() return ends(i) end)
end, ends))
