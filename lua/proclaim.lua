-- proclaim.lua: change the value of an election's leadership, without an
-- election (see is_candidate in lib.lua).
--
-- KEYS[1..4]  the election's keys (see lib.lua)
-- ARGV[1]     owner id of the leadership
-- ARGV[2]     the candidate entry it was granted to
-- ARGV[3]     the new value
-- ARGV[4]     on a quorum's master, the sequence number of the Proclaim
--             (written as 'vseq', so that a reading of a majority takes
--             the latest value; a call whose number is not above the
--             hold's vseq, one that arrives after a later one, writes
--             nothing and answers 1); absent on one deployment
--
-- Returns 1 when the leadership is the caller's (the hold's owner and
-- entry are ARGV[1] and ARGV[2]) and its value is now ARGV[3], and 0,
-- having written nothing, when it is not: the hold is gone, or another
-- leader's. The election's observers are told of the new value. If the
-- server refuses that PUBLISH, the value is still written, and the call
-- replies with an error that starts with "NOPERM " (see lib.lua) in
-- place of 1.
--
-- On a full server (maxmemory reached) a value that needs more memory is
-- refused with the server's OOM error, having written nothing.

local hold = redis.call('HMGET', KEYS[1], 'owner', 'entry', 'vseq')
if hold[1] ~= ARGV[1] or hold[2] ~= ARGV[2] then
  return 0
end
if ARGV[4] and hold[3] and tonumber(hold[3]) >= tonumber(ARGV[4]) then
  return 1
end
if ARGV[4] then
  redis.call('HSET', KEYS[1], 'value', ARGV[3], 'vseq', ARGV[4])
else
  redis.call('HSET', KEYS[1], 'value', ARGV[3])
end
tell_leader(LOCK)
return finish(1)
