-- wresize.lua: change a Semaphore's stored capacity, and grant the
-- waiters from the head that now fit.
--
-- KEYS[1..5]  the weighted lock's keys (see "Weighted locks" in lib.lua)
-- ARGV[1]     the new capacity (permits), 1 to 2^53
-- ARGV[2]     wake channel P:{N}:sem:wake
--
-- Holders above a lowered capacity keep their permits until they release
-- them; nobody new is granted until the weights held fit under it. A
-- waiter whose weight is above the new capacity is told at once (tell in
-- lib.lua), so that it polls and its poll refuses it: one at the head
-- leaves the line here (grant_heads), one further back when its poll
-- refuses it. Telling those further back reads the whole line, once per
-- lowering. Returns the capacity stored before, or 0 when none was in
-- force (nothing held or waited, see in_use in lib.lua: then nothing is
-- stored, and the next grant stores its caller's capacity). A refused
-- PUBLISH is answered with an error that starts with "NOPERM " (see
-- lib.lua), after every write.

local SK = weighted_keys(LOCK, KEYS[5])
local now = now_ms()
weighted_load(SK)
prune_holders(SK, now)
local before = SK.cap
if not before or not in_use(SK, now) then
  flush_used(SK)
  return 0
end
local cap = tonumber(ARGV[1])
redis.call('HSET', SK.hold, 'permits', ARGV[1])
SK.cap = cap
grant_heads(SK, now, ARGV[2])
if cap < before then
  for _, entry in ipairs(redis.call('LRANGE', SK.queue, 0, -1)) do
    local owner, _, weight = parse_weighted(entry)
    if owner and weight > cap then
      tell(ARGV[2], entry)
    end
  end
end
keep_alive(SK, now)
return finish(before)
