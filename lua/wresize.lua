-- wresize.lua: change a Semaphore's stored capacity, and grant the
-- waiters from the head that now fit.
--
-- KEYS[1..5]  the weighted lock's keys (see "Weighted locks" in lib.lua)
-- ARGV[1]     the new capacity (permits), 1 to 2^53
-- ARGV[2]     wake channel P:{N}:sem:wake
--
-- Holders above a lowered capacity keep their permits until they release
-- them; nobody new is granted until the weights held fit under it. A
-- waiter whose weight is above the new capacity is taken out of the line,
-- and its next poll fails. Returns the capacity stored before, or 0 when
-- none was in force (nothing held or waited, see in_use in lib.lua: then
-- nothing is stored, and the next grant stores its caller's capacity). A
-- refused PUBLISH is answered with an error that starts with "NOPERM "
-- (see lib.lua), after every write.

local SK = weighted_keys(LOCK, KEYS[5])
local now = now_ms()
prune_holders(SK, now)
local before = capacity(SK)
if not before or not in_use(SK, now) then
  return 0
end
redis.call('HSET', SK.hold, 'permits', ARGV[1])
grant_heads(SK, now, ARGV[2])
keep_alive(SK, now)
return finish(before)
