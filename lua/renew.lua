-- renew.lua: extend a hold's lease (the watchdog's heartbeat).
--
-- KEYS[1]  P:{N}  the lock hash
-- ARGV[1]  owner id
-- ARGV[2]  lease in ms
--
-- Returns 1 when the owner holds the lock and its expiry was set to the
-- lease, 0 when the owner no longer holds it (the lease was lost).
-- Renewing twice is harmless, so a re-sent call needs no receipt.

if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
