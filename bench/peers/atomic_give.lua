-- Gives back the keys of KEYS that still hold ARGV[1], the value they
-- were taken with, and leaves any other alone. Returns how many it
-- deleted.
local n = 0
for _, key in ipairs(KEYS) do
  if redis.call('get', key) == ARGV[1] then
    redis.call('del', key)
    n = n + 1
  end
end
return n
