-- forceunlock.lua: remove the hold whoever owns it, and hand the lock to
-- the next live waiter.
--
-- KEYS[1..4]  the lock's keys (see lib.lua)
-- ARGV[1]     wake channel P:{N}:wake
--
-- Returns 1 when a hold was removed, 0 when the lock was free.
--
-- The former holder's Client is told (revoke in lib.lua), and then, when
-- a live waiter is handed the lock, its wake message is published. If
-- the server refuses a PUBLISH, the call still does every write (the
-- old hold is gone, the waiter is the owner), and replies with an error
-- that starts with "NOPERM " (see lib.lua) in place of its reply, which
-- would have been 1 or 0 as above.

local entry = redis.call('HGET', KEYS[1], 'entry')
local removed = redis.call('DEL', KEYS[1])
revoke(ARGV[1], entry)
hand_on(LOCK, entry, nil, ARGV[1])
return finish(removed)
