-- block.lua: an operator's look at, or block of, one key (Store.Block and
-- BlockedUntil). It is sent on its own, not after lib.lua; the block's key
-- and value are those lib.lua reads before every take.
--
-- KEYS[1]  the key's block: "<prefix><zone>:{<key>}:b", the instant (µs)
--          the block ends, with a PX TTL to match
-- ARGV[1]  "b": block for ARGV[3] µs (a longer block in place is kept);
--          "r": only read
-- ARGV[2]  now in microseconds since the epoch; "" means Redis TIME
--
-- Answers when the block ends (µs), or 0 when the key is not blocked at
-- now.
if redis.replicate_commands then redis.replicate_commands() end

local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local ends = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if ARGV[1] == 'b' then
  local want = now + tonumber(ARGV[3])
  if want > ends then
    ends = want
    local ms = math.ceil((ends - now) / 1000)
    redis.call('SET', KEYS[1], string.format('%d', ends), 'PX', string.format('%d', ms))
  end
end
if ends <= now then return 0 end
return ends
