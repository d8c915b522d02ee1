-- forceunlock.lua: remove the hold whoever owns it, and hand the lock to
-- the next live waiter.
--
-- KEYS[1..4]  the lock's keys (see lib.lua)
-- ARGV[1]     wake channel P:{N}:wake
--
-- Returns 1 when a hold was removed, 0 when the lock was free.

local removed = redis.call('DEL', KEYS[1])
hand_over(now_ms(), ARGV[1])
return removed
