-- wforce.lua: remove one holder's hold of a weighted lock, every level of
-- it, whoever holds it, and grant the waiters from the head that now fit.
--
-- KEYS[1..5]  the weighted lock's keys (see "Weighted locks" in lib.lua)
-- ARGV[1]     wake channel P:{N}:<kind>:wake
-- ARGV[2]     the holder's owner id
--
-- Returns 1 when a hold was removed, 0 when the owner held none (or its
-- lease had ended).
--
-- The former holder's Client is told (revoke in lib.lua), and then the
-- waiters granted are told by their wake messages. If the server refuses
-- a PUBLISH, the call still does every write, and replies with an error
-- that starts with "NOPERM " (see lib.lua) in place of its reply.
--
-- Its first write is the holder's HDEL, which a full server lets through
-- (see allow_full).

local SK = weighted_keys(LOCK, KEYS[5])
local owner = ARGV[2]
local now = now_ms()
local h = weighted_load(SK, owner)
local expiry = redis.call('ZSCORE', SK.holders, owner)
local removed = 0
if h and expiry and tonumber(expiry) > now then
  drop_holder(SK, owner, h)
  revoke(ARGV[1], h.entry)
  removed = 1
end
prune_holders(SK, now)
grant_heads(SK, now, ARGV[1])
keep_alive(SK, now)
return finish(removed)
