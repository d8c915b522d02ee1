-- qforce.lua: remove a quorum lock's hold on one master, whoever
-- owns it, and hand the lock to the next live waiter there.
--
-- KEYS[1..5]  the lock's keys on this master (see qlib.lua)
-- ARGV[1]     wake channel P:{N}:q:wake
-- ARGV[2]     waiter TTL in ms
-- ARGV[3]     clock skew in us (0; see qlib.lua)
--
-- Returns 1 when a hold was removed, 0 when there was none.

local lk = quorum_lock(3, tonumber(ARGV[2]))
local now = now_ms()
local entry = redis.call('HGET', lk.hold, 'entry')
local removed = redis.call('DEL', lk.hold)
revoke(ARGV[1], entry)
tell_ended(lk, entry)
settle(lk, nil, now, ARGV[1])
return finish(removed)
