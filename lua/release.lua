-- release.lua: give up one level of a hold; at the last level, hand the
-- lock to the next live waiter.
--
-- KEYS[1..4]  the lock's keys (see lib.lua)
-- KEYS[5]     P:{N}:call:<call id>  receipt of this call
-- ARGV[1]     owner id
-- ARGV[2]     lease in ms for the levels that remain; 0 keeps the
--             current expiry (a fixed lease is never extended)
-- ARGV[3]     wake channel P:{N}:wake
-- ARGV[4]     receipt TTL in ms
-- ARGV[5]     tag of the Client that releases ('' for none)
--
-- Returns the levels the owner still holds (0: the hold is over), or -1
-- when the owner does not hold the lock; or {0, wake message} when the
-- lock was handed to a waiter of the releasing Client itself (ARGV[5]),
-- to which nothing was published: the Client hands it the message (see
-- hand_over in lib.lua). A re-sent call answers what the first one
-- answered (see the receipt in acquire.lua).
--
-- At the last level the lock is handed to the next live waiter, whose
-- wake message is published. If the server refuses that PUBLISH, the call
-- still does every write (the hold is over, the waiter is the owner, the
-- receipt says 0), and replies with an error that starts with "NOPERM "
-- (see lib.lua) in place of its reply, which is then always 0: a release
-- publishes only when the hold is over.
--
-- It works on a full server (maxmemory reached; see lib.lua).

local kept = receipt(KEYS[5])
if kept then
  local count, message = string.match(kept, '^(%d+) (.+)$')
  if message then
    return {tonumber(count), message}
  end
  return tonumber(kept)
end

local hold = redis.call('HMGET', KEYS[1], 'owner', 'count')
if hold[1] ~= ARGV[1] then
  return -1
end

-- A release goes through on a full server (see lib.lua): refused, it
-- would leave the lock blocked until the hold's lease ran out. So its
-- first write is one that cannot grow memory: the DEL of the hold at
-- the last level, the PEXPIRE of a level above it, or, for a level above
-- the last of a fixed lease (which nothing extends), allow_full.
local count = (tonumber(hold[2]) or 1) - 1
if count > 0 then
  local lease = tonumber(ARGV[2])
  if lease > 0 then
    redis.call('PEXPIRE', KEYS[1], lease)
  else
    allow_full(KEYS[5])
  end
  redis.call('HINCRBY', KEYS[1], 'count', -1)
else
  count = 0
  redis.call('DEL', KEYS[1])
  -- The lock is never free between two holders: the next live waiter
  -- becomes the owner here and is woken with its token, by pub/sub or,
  -- when it waits in the releasing Client, by that Client.
  local own = ARGV[5]
  if own == '' then
    own = nil
  end
  local _, message = hand_over(LOCK, nil, ARGV[3], own)
  if message then
    keep_receipt(KEYS[5], '0 ' .. message, ARGV[4])
    return {0, message}
  end
end
keep_receipt(KEYS[5], count, ARGV[4])
return finish(count)
