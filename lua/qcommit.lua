-- qcommit.lua: a quorum lock's holder commits its fencing token on one
-- master (the first Token call of a hold).
--
-- KEYS[1..5]  the lock's keys on this master (see qlib.lua)
-- ARGV[1]     owner id
-- ARGV[2]     token T: the largest token of the hold's masters
-- ARGV[3]     lease in ms: K is kept at least that long (with the waiter
--             TTL); the hold's expiry is left as it is (its watchdog
--             renews it)
-- ARGV[4]     waiter TTL in ms
-- ARGV[5]     clock skew in us (0; see qlib.lua)
--
-- Returns {1, T} when the owner holds here under a token at most T: the
-- hold's token becomes T, and K at least T, so that every later hold here
-- has a larger token. {2, token} when the hold here has a larger token
-- (the caller commits that one instead); {0, K} when the owner does not
-- hold here.

local owner = ARGV[1]
local t = ARGV[2]
local lease = tonumber(ARGV[3])
local waiter_ttl = tonumber(ARGV[4])
local lk = quorum_lock(5, waiter_ttl)

local h = quorum_hold(lk)
if not h or h.owner ~= owner then
  return {0, counter(lk)}
end
if tonumber(h.token) > tonumber(t) then
  return {2, h.token}
end
local now = now_ms()
local keep = math.max(lease, waiter_ttl)
if redis.REDIS_VERSION then
  -- One SET ... GET writes t and answers the K it replaced, which is
  -- usually the hold's token, so at most t; a larger one goes back.
  local was = redis.call('SET', lk.token, t, 'PX', math.max(now + math.max(keep, 1), outlast(t)) - now, 'GET')
  if was and tonumber(was) > tonumber(t) then
    raise(lk.token, tonumber(was), t, now, keep)
  end
else
  raise(lk.token, tonumber(redis.call('GET', lk.token) or '0'), t, now, keep)
end
if is_candidate(h.entry) then
  -- A leadership's term is its committed token, kept as 'term' on each
  -- master the commit reaches: a reading of any majority finds it there
  -- (a master the commit did not need may hold under another token).
  -- A change is told.
  if h.token ~= t or redis.call('HGET', lk.hold, 'term') ~= t then
    redis.call('HSET', lk.hold, 'token', t, 'term', t)
    tell_leader(lk)
  end
elseif h.token ~= t then
  redis.call('HSET', lk.hold, 'token', t)
end
return finish({1, t})
