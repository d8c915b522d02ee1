-- Takes every key of KEYS, or none: sets each to ARGV[1] with a time to
-- live of ARGV[2] milliseconds when none of them exists, and otherwise
-- sets nothing. Returns 1 when it took them, 0 when one was taken.
local args = {}
for i, key in ipairs(KEYS) do
  args[2 * i - 1] = key
  args[2 * i] = ARGV[1]
end
if redis.call('msetnx', unpack(args)) == 0 then
  return 0
end
for _, key in ipairs(KEYS) do
  redis.call('pexpire', key, ARGV[2])
end
return 1
