-- wacquire.lua: take a weighted lock (a Semaphore's permits, a RWMutex's
-- read or write hold), re-enter a hold, or wait in line for it.
--
-- KEYS[1..5]  the weighted lock's keys (see "Weighted locks" in lib.lua)
-- KEYS[6]     P:{N}:<kind>:call:<call id>  receipt of this call
-- ARGV[1]     owner id: new for every hold (a weighted hold is re-entered
--             only through the context that carries it)
-- ARGV[2]     waiter entry of this call (see lib.lua)
-- ARGV[3]     lease in ms; 0 keeps a re-entered hold's expiry
-- ARGV[4]     waiter TTL in ms
-- ARGV[5]     mode: "try", "wait" or "reenter", as for acquire.lua
-- ARGV[6]     wake channel P:{N}:<kind>:wake
-- ARGV[7]     receipt TTL in ms
-- ARGV[8]     weight: the permits asked for; a RWMutex's reader 1, its
--             writer RW_CAPACITY
-- ARGV[9]     "x" for a writer (an exclusive level), "s" otherwise
-- ARGV[10]    the caller's capacity: a Semaphore handle's permits (at
--             most 2^53), or 0 for a RWMutex (RW_CAPACITY)
--
-- Replies as acquire.lua does: {1, token, count} when the caller holds
-- after the call (count: its levels of the kind asked for), or
-- {0, hint, joined[, server time in us]} when it does not. A call the
-- lock refuses is answered with an error that starts with "FAIRLOCK ":
--
--   FAIRLOCK PERMITS <n>  a fresh caller whose capacity is not the one
--                         stored, n
--   FAIRLOCK TOOBIG <n>   a weight above the stored capacity n (lowered
--                         since the caller's handle read it)
--   FAIRLOCK UPGRADE      a write re-entry of an owner that only reads:
--                         it would wait for its own read hold
--   FAIRLOCK HELD         a fresh call of an owner that holds already,
--                         or that came to hold under another of its
--                         entries, granted on the way
--
-- A grant is claimed by a call under the entry it was given to (a
-- hand-over, or a reply that was lost), and a re-entry leaves a receipt,
-- as in acquire.lua. A refused PUBLISH of a hand-over made on the way is
-- answered as in acquire.lua.
--
-- On a full server (see lib.lua) a claim, a re-entry and a heartbeat of a
-- waiter already in line go through, their first write one that cannot
-- grow memory; a fresh grant and a waiter joining the line are refused
-- with the server's OOM error, having written nothing, unless the same
-- call dropped an expired holder or a dead waiter first (a write that
-- cannot grow memory, after which the server lets the rest through).

local owner = ARGV[1]
local entry = ARGV[2]
-- (Numbers by arithmetic, which parses once: see now_ms in lib.lua.)
local lease = ARGV[3] + 0
local waiter_ttl = ARGV[4] + 0
local mode = ARGV[5]
local channel = ARGV[6]
local weight = ARGV[8] + 0
local excl = ARGV[9] == 'x'
local mine = ARGV[10] + 0
if mine == 0 then
  mine = RW_CAPACITY
end
local SK = weighted_keys(LOCK, KEYS[5])

local now = now_ms()
local h = weighted_load(SK, owner)
if prune_holders(SK, now, owner) then
  h = nil
end
flush_used(SK)

-- claim answers the grant h made to this very entry (a hand-over, or a
-- reply that was lost): the entry leaves the line, and the hold gets the
-- full lease from now.
local function claim(h)
  leave(SK, entry)
  if lease > 0 then
    set_lease(SK, owner, lease, now)
  end
  keep_alive(SK, now)
  if excl then
    return {1, tonumber(h.token), h.excl}
  end
  return {1, tonumber(h.token), h.shared}
end

-- 1. The owner holds: a claim of the grant made to this very entry, or a
--    re-entry.
if h and h.entry == entry then
  return claim(h)
end
if h then
  if mode ~= 'reenter' then
    return redis.error_reply('FAIRLOCK HELD the owner holds this lock already')
  end
  local kept = receipt(KEYS[6])
  if kept then
    local token, count = string.match(kept, '^(%d+):(%d+)$')
    return {1, tonumber(token), tonumber(count)}
  end
  if excl and h.excl == 0 then
    return redis.error_reply('FAIRLOCK UPGRADE a read hold cannot take the write lock')
  end
  -- A re-entry keeps a hold, so it goes through on a full server (see
  -- lib.lua): its first write is the DEL of the receipt just found absent.
  allow_full(KEYS[6])
  local count
  if excl then
    h.excl = h.excl + 1
    count = h.excl
  else
    h.shared = h.shared + 1
    count = h.shared
  end
  put_holder(SK, owner, h)
  if lease > 0 then
    set_lease(SK, owner, lease, now)
  end
  keep_alive(SK, now)
  keep_receipt(KEYS[6], h.token .. ':' .. count, ARGV[7])
  return {1, tonumber(h.token), count}
end

-- A re-entry whose owner no longer holds must not turn into a fresh
-- grant; the waiters that now fit are granted on the way.
if mode == 'reenter' then
  grant_heads(SK, now, channel)
  keep_alive(SK, now)
  return finish({0, 0, 0})
end

-- 2. The capacity: stored by the first grant that finds none in force.
--    Whether the caller waits in line is read only when its capacity is
--    not the stored one.
local cap = SK.cap
if cap and not in_use(SK, now) then
  cap = nil
end
if cap and weight > cap then
  leave(SK, entry)
  keep_alive(SK, now)
  return redis.error_reply(string.format('FAIRLOCK TOOBIG %d', cap))
end
if cap and cap ~= mine and not redis.call('ZSCORE', SK.deadline, entry) then
  return redis.error_reply(string.format('FAIRLOCK PERMITS %d', cap))
end
if not cap then
  cap = mine
  redis.call('HSET', SK.hold, 'permits', string.format('%d', cap))
end
SK.cap = cap

-- 3. Grant the waiters ahead that now fit (expired holders gave their
--    weight back), which may be this very entry: then claim it. An owner
--    granted under another of its entries holds already. The walk stops
--    at the first live head that does not fit, if any (true: the lock is
--    full, and the walk read nothing of the line; see grant_heads).
local head, mine_entry, mine_token = grant_heads(SK, now, channel, owner)
if mine_entry == entry then
  local _, _, _, granted_excl = parse_weighted(entry)
  if granted_excl then
    return claim({token = mine_token, shared = 0, excl = 1})
  end
  return claim({token = mine_token, shared = 1, excl = 0})
end
if mine_entry then
  leave(SK, entry)
  keep_alive(SK, now)
  return finish(redis.error_reply('FAIRLOCK HELD the owner holds this lock already'))
end

-- 4. A caller nobody live is ahead of is granted when its weight fits.
if (not head or head == entry) and fits(weight, SK.held, cap) then
  leave(SK, entry)
  local token = grant_weighted(SK, owner, entry, weight, excl, lease, now)
  keep_alive(SK, now)
  return {1, tonumber(token), 1}
end

-- 5. Wait in line, or in try mode go.
if mode ~= 'wait' then
  keep_alive(SK, now)
  return finish({0, 0, 0})
end
local joined = join(SK, entry, now, waiter_ttl)
SK.need = math.max(SK.need, now + waiter_ttl)
keep_alive(SK, now)
return finish({0, weighted_hint(SK, waiter_ttl, now), joined, clock_us or now * 1000})
