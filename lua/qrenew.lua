-- qrenew.lua: a quorum lock's holder renews its lease on one master.
--
-- KEYS[1..5]  the lock's keys on this master (see qlib.lua)
-- ARGV[1]     owner id
-- ARGV[2]     lease in ms
--
-- Returns {1, token} when the owner holds here (its expiry is then the
-- lease from now), else {0, K}: the token counter, which is at least the
-- token of every hold this master has made.

local h = redis.call('HMGET', KEYS[1], 'owner', 'token')
if h[1] ~= ARGV[1] then
  return {0, redis.call('GET', KEYS[4]) or '0'}
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return {1, h[2] or '0'}
