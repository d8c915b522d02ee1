-- cancel.lua: a waiter gives up; it leaves nothing behind.
--
-- KEYS[1..4]  the lock's keys (see lib.lua)
-- ARGV[1]     owner id
-- ARGV[2]     waiter entry of the Lock call that gives up
-- ARGV[3]     wake channel P:{N}:wake
--
-- Removes the entry from the queue and the deadline set. If the lock was
-- handed to this entry meanwhile (the grant raced with the give-up), that
-- level is released, which hands the lock to the next live waiter. If the
-- lock is free while others wait, it is handed to the live head.
-- Returns 1 when a level handed to the entry was released, else 0.
-- A re-sent call finds nothing left to do.
--
-- When the lock is handed on, the next live waiter's wake message is
-- published. If the server refuses that PUBLISH, the call still does
-- every write (the entry is out of the queue, the caller holds nothing
-- handed to it, the head is the owner), and replies with an error that
-- starts with "NOPERM " (see lib.lua) in place of its reply, which would
-- have been 1 (a level handed to the entry was given back) or 0 (the lock
-- was free).

local owner = ARGV[1]
local entry = ARGV[2]
local channel = ARGV[3]

if redis.call('ZREM', KEYS[3], entry) == 1 then
  -- The only step whose cost grows with the queue: paid once, by a waiter
  -- that gives up.
  redis.call('LREM', KEYS[2], 1, entry)
end

local hold = redis.call('HMGET', KEYS[1], 'owner', 'entry')
if hold[1] == owner and hold[2] == entry then
  local count = redis.call('HINCRBY', KEYS[1], 'count', -1)
  if count > 0 then
    -- Other levels of a shared owner remain; forget which entry the hold
    -- was handed to so a re-sent cancel releases nothing more.
    redis.call('HDEL', KEYS[1], 'entry')
  else
    redis.call('DEL', KEYS[1])
    hand_over(LOCK, nil, channel)
  end
  return finish(1)
end

if not hold[1] then
  hand_over(LOCK, nil, channel)
end
return finish(0)
