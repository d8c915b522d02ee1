-- cancel.lua: a waiter gives up; it leaves nothing behind.
--
-- KEYS[1..4]  the lock's keys (see lib.lua); for a MultiLock's ticket,
--             the keys of each of its locks, four by four, in key order
-- ARGV[1]     owner id
-- ARGV[2]     waiter entry of the Lock call that gives up
-- ARGV[3]     wake channel P:{N}:wake of the first lock
--
-- Removes the entry from each lock's queue and deadline set (and drops a
-- ticket's key). If a lock was handed to this entry meanwhile (the
-- grant raced with the give-up), that level is released, which hands the
-- lock to the next live waiter. If a lock is free while others wait, it
-- is handed to the live head. Returns 1 when a level handed to the entry
-- was released, else 0. A re-sent call finds nothing left to do.
--
-- When a lock is handed on, the next live waiter's wake message is
-- published. If the server refuses that PUBLISH, the call still does
-- every write (the entry is out of the queue, the caller holds nothing
-- handed to it, the head is the owner), and replies with an error that
-- starts with "NOPERM " (see lib.lua) in place of its reply, which would
-- have been 1 (a level handed to the entry was given back) or 0 (the lock
-- was free).

local owner = ARGV[1]
local entry = ARGV[2]

local locks = {LOCK}
for i = 5, #KEYS - 3, 4 do
  locks[#locks + 1] = lock_keys(KEYS[i])
end

for _, l in ipairs(locks) do
  leave(l, entry)
end
if #locks > 1 then
  redis.call('DEL', ticket_key(LOCK, entry))
end

local released = 0
for i, l in ipairs(locks) do
  local channel = ARGV[3]
  if i > 1 then
    channel = l.hold .. ':wake'
  end
  local hold = redis.call('HMGET', l.hold, 'owner', 'entry')
  if hold[1] == owner and hold[2] == entry then
    released = 1
    local count = redis.call('HINCRBY', l.hold, 'count', -1)
    if count > 0 then
      -- Other levels of a shared owner remain; forget which entry the
      -- hold was handed to so a re-sent cancel releases nothing more.
      redis.call('HDEL', l.hold, 'entry')
    else
      redis.call('DEL', l.hold)
      hand_on(l, entry, nil, channel)
    end
  elseif not hold[1] then
    hand_over(l, nil, channel)
  end
end
return finish(released)
