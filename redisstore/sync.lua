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
-- Answers the total of every KEYS[j] after the update, in order.
local out = {}
for j = 1, #KEYS do
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
return out
