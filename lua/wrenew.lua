-- wrenew.lua: extend a weighted hold's lease (the watchdog's heartbeat).
--
-- KEYS[1..5]  the weighted lock's keys (see "Weighted locks" in lib.lua)
-- ARGV[1]     owner id
-- ARGV[2]     lease in ms
--
-- Returns 1 when the owner holds and its lease now ends lease ms from the
-- server's now, 0 when its hold is gone (the lease was lost). Renewing
-- twice is harmless, so a re-sent call needs no receipt. On a full server
-- its first write is a PEXPIREAT, which cannot grow memory (see lib.lua).

local owner = ARGV[1]
local lease = tonumber(ARGV[2])
local SK = weighted_keys(LOCK, KEYS[5])
local now = now_ms()
local expiry = redis.call('ZSCORE', SK.holders, owner)
if not expiry or tonumber(expiry) <= now or not holder(SK, owner) then
  return 0
end
-- The keys' expiry first (it cannot grow memory), never moved earlier.
local at = now + math.max(lease, 1)
local pttl = redis.call('PTTL', SK.hold)
if pttl > 0 then
  at = math.max(at, now + pttl)
end
redis.call('PEXPIREAT', SK.hold, at)
redis.call('PEXPIREAT', SK.holders, at)
set_lease(SK, owner, lease, now)
return 1
