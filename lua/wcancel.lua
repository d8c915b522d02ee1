-- wcancel.lua: a waiter of a weighted lock gives up; it leaves nothing
-- behind.
--
-- KEYS[1..5]  the weighted lock's keys (see "Weighted locks" in lib.lua)
-- ARGV[1]     owner id
-- ARGV[2]     waiter entry of the call that gives up
-- ARGV[3]     wake channel P:{N}:<kind>:wake
--
-- Removes the entry from the line. If it was granted meanwhile (the grant
-- raced with the give-up), that hold is dropped. Either way the waiters
-- from the head that now fit are granted (the one that gave up may have
-- blocked them). Returns 1 when a grant to the entry was given back, else
-- 0; a re-sent call finds nothing left to do. A refused PUBLISH is
-- answered with an error that starts with "NOPERM " (see lib.lua), after
-- every write.

local owner = ARGV[1]
local entry = ARGV[2]
local SK = weighted_keys(LOCK, KEYS[5])
local now = now_ms()
leave(SK, entry)
local released = 0
local h = weighted_load(SK, owner)
if h and h.entry == entry then
  drop_holder(SK, owner, h)
  released = 1
end
prune_holders(SK, now)
grant_heads(SK, now, ARGV[3])
keep_alive(SK, now)
return finish(released)
