-- layout.lua: the layout version of the keys under a prefix, written by
-- the first Client that asks, so that a Client of another layout refuses
-- them instead of misreading them.
--
-- KEYS[1]  P:layout
-- ARGV[1]  the layout version the Client writes
--
-- Returns the version the key holds: ARGV[1] when it had none (it is
-- written then, without expiry). The write is made with pcall: a full
-- server that refuses it leaves the key for a later Client to write, and
-- the Client goes on with its own version.

local v = redis.call('GET', KEYS[1])
if v then
  return v
end
redis.pcall('SET', KEYS[1], ARGV[1])
return ARGV[1]
