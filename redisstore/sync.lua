-- sync.lua: the one call per key and interval of the two-layer store
-- (SyncStore; read the model in TWO_LAYER.md). It is sent on its own, not
-- after lib.lua.
--
-- KEYS[j]    a window counter: "<...>:sy:<digest>:<tier>:<window index>"
--            (all of one zone key, so one hash tag and one Cluster slot)
-- ARGV[2j-1] the delta this instance adds to KEYS[j] (an integer, maybe 0
--            or negative: an Undo of units pushed before)
-- ARGV[2j]   the PEXPIRE of KEYS[j] in milliseconds, set on every write
--
-- A key is written (INCRBY, then PEXPIRE) only when its delta is not 0;
-- otherwise it is only read, so a read never creates a key without a TTL.
-- A total never goes below 0 (an Undo retried after a lost reply).
--
-- The last key, KEYS[#KEYS], is the key's block (see lib.lua), its
-- ARGV pair the end (µs) of a block this instance set (block_for), 0 for
-- none, and its PX in milliseconds: it is set unless a longer block is in
-- place, and read back.
--
-- Answers the total of every counter after the update, in order, then when
-- the key's block ends (0: none).
local out = {}
local nc = #KEYS - 1
for j = 1, nc do
  local key = KEYS[j]
  local d = tonumber(ARGV[2 * j - 1])
  local v
  if d ~= 0 then
    v = redis.call('INCRBY', key, d)
    if v < 0 then
      v = 0
      redis.call('SET', key, '0', 'PX', ARGV[2 * j])
    else
      redis.call('PEXPIRE', key, ARGV[2 * j])
    end
  else
    v = tonumber(redis.call('GET', key) or '0') or 0
  end
  out[j] = v
end
local bkey, set = KEYS[#KEYS], tonumber(ARGV[2 * #KEYS - 1])
local ends = tonumber(redis.call('GET', bkey) or '0') or 0
if set > ends then
  redis.call('SET', bkey, ARGV[2 * #KEYS - 1], 'PX', ARGV[2 * #KEYS])
  ends = set
end
out[#KEYS] = ends
return out
