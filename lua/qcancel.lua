-- qcancel.lua: a quorum lock's Lock call gives up on one master.
--
-- KEYS[1..5]  the lock's keys on this master (see qlib.lua)
-- ARGV[1]     waiter entry of the Lock call
-- ARGV[2]     wake channel P:{N}:q:wake
-- ARGV[3]     waiter TTL in ms
-- ARGV[4]     tombstone TTL in ms
-- ARGV[5]     clock skew in us (0; see qlib.lua)
--
-- Returns 1 when a hold of the entry was given up, else 0. The entry
-- leaves the line and is buried: a join of it that arrives later is
-- refused. The lock then goes to the next live waiter (settle).

local entry = ARGV[1]
local channel = ARGV[2]
local lk = quorum_lock(5, tonumber(ARGV[3]))
local now = now_ms()

leave(lk, entry)
bury(lk, entry, tonumber(ARGV[4]))
local h = quorum_hold(lk)
local dropped = 0
if h and h.entry == entry then
  redis.call('DEL', lk.hold)
  tell_ended(lk, entry)
  h, dropped = nil, 1
end
settle(lk, h, now, channel)
return finish(dropped)
