-- qrelease.lua: a quorum lock's owner gives up one level on one master.
--
-- KEYS[1..5]  the lock's keys on this master (see qlib.lua)
-- KEYS[6]     P:{N}:q:call:<call id>  receipt of this call
-- ARGV[1]     owner id
-- ARGV[2]     waiter entry of the Lock call that took the hold
-- ARGV[3]     the hold's committed token, or "0" (see qcommit)
-- ARGV[4]     lease in ms of a hold that keeps levels; 0 keeps its expiry
-- ARGV[5]     "1" when the owner gives up its last level, else "0"
-- ARGV[6]     waiter TTL in ms
-- ARGV[7]     wake channel P:{N}:q:wake
-- ARGV[8]     tombstone TTL in ms
-- ARGV[9]     receipt TTL in ms
-- ARGV[10]    clock skew in us (0; see qlib.lua)
--
-- Returns {held, count}: held 1 when the owner held here, count the levels
-- it keeps. At the last level the hold ends, the committed token is
-- written into K (so that every later token here is above it) when K is
-- below it, the entry leaves the line (the holder's entry is never in
-- it) and is buried, and the lock goes to the next live waiter. A call
-- that keeps levels leaves a receipt, so that a call sent again counts
-- once; one that ends the hold, or finds none, leaves the tombstone only,
-- which serves as its receipt: a last release that finds the entry
-- buried answers {1, 0} and does nothing (the entry of a hold is buried
-- only once the hold has ended, or never held here).

local owner = ARGV[1]
local entry = ARGV[2]
local committed = ARGV[3]
local lease = tonumber(ARGV[4])
local last = ARGV[5] == '1'
local waiter_ttl = tonumber(ARGV[6])
local channel = ARGV[7]
local tomb = tonumber(ARGV[8])
local receipt_ttl = tonumber(ARGV[9])
local lk = quorum_lock(10, waiter_ttl)

local got = redis.call('MGET', KEYS[6], lk.token, gone_key(lk, entry))
if got[1] then
  return {1, tonumber(got[1])}
end
if last and got[3] then
  return {1, 0}
end
load_counter(lk, got[2])
local now = now_ms()
local h = quorum_hold(lk)
if not h or h.owner ~= owner then
  if last then
    leave(lk, entry)
    bury(lk, entry, tomb)
    settle(lk, h, now, channel)
  end
  return finish({0, 0})
end
if h.count > 1 then
  local count = redis.call('HINCRBY', lk.hold, 'count', -1)
  if lease > 0 then
    redis.call('PEXPIRE', lk.hold, lease)
  end
  keep_receipt(KEYS[6], count, receipt_ttl)
  return {1, count}
end
-- The hold ends. Every later token here must be above the committed
-- one: a hand-over draws its token above lk.k, and writes it into K;
-- with nobody to hand over to, K is raised to it (unless a commit here
-- raised it already: K is kept until the clock term has passed it).
local raise_to = nil
if committed ~= '0' and lk.k < tonumber(committed) then
  lk.k, raise_to = tonumber(committed), committed
end
if h.entry ~= entry then
  leave(lk, entry)
end
-- The head takes the hold in place, or the hash goes: either way the
-- first write cannot grow memory (ZPOPMIN, DEL; see allow_full).
quorum_hand_over(lk, now, channel, true)
tell_ended(lk, h.entry)
if raise_to and lk.k then
  -- No token was drawn (draw_token forgets lk.k): K is raised here.
  raise(lk.token, tonumber(got[2] or '0') or 0, raise_to, now, waiter_ttl)
end
if h.entry ~= entry then
  bury(lk, h.entry, tomb)
end
bury(lk, entry, tomb)
return finish({1, 0})
