-- wrenew.lua: extend a weighted hold's lease (the watchdog's heartbeat).
--
-- KEYS[1..5]  the weighted lock's keys (see "Weighted locks" in lib.lua)
-- ARGV[1]     owner id
-- ARGV[2]     lease in ms
--
-- Returns 1 when the owner holds and its lease now ends lease ms from the
-- server's now, 0 when its hold is gone (the lease was lost). Renewing
-- twice is harmless, so a re-sent call needs no receipt. The keys'
-- expiry moves only when the new lease ends after it (see keep_alive in
-- lib.lua). On a full server its first write is a PEXPIREAT, which cannot
-- grow memory (see lib.lua).

local owner = ARGV[1]
local lease = tonumber(ARGV[2])
local SK = weighted_keys(LOCK, KEYS[5])
local now = now_ms()
local expiry = redis.call('ZSCORE', SK.holders, owner)
if not expiry or tonumber(expiry) <= now then
  return 0
end
local r = redis.call('HMGET', SK.hold, 'o:' .. owner, 'expires')
if not parse_holder(r[1]) then
  return 0
end
local ends = now + math.max(lease, 1)
local expires = tonumber(r[2] or '0')
if ends > expires then
  expire_at(SK, 2 * ends - now)
else
  -- Changes nothing (the set expires then already), but is a write that
  -- cannot grow memory, before the ZADD, which could.
  redis.call('PEXPIREAT', SK.holders, string.format('%d', expires))
end
redis.call('ZADD', SK.holders, ends, owner)
return 1
