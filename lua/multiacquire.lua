-- multiacquire.lua: take several locks of one server at once, or wait in
-- all their lines at once with one ticket (see lib.lua).
--
-- KEYS        the keys of each lock (see lib.lua), four by four, in key
--             order; at least two locks
-- ARGV[1]     owner id
-- ARGV[2]     the ticket: the waiter entry of this MultiLock call, whose
--             waiter id ends with the ticket version (see lib.lua)
-- ARGV[3]     lease in ms of each hold
-- ARGV[4]     waiter TTL in ms: how long a queued ticket keeps its place
--             without polling again
-- ARGV[5]     mode: "try" never enqueues; "wait" enqueues or heartbeats
--
-- Returns {1, token of each lock...} when the caller holds every lock
-- after the call (a fresh grant, or a grant to the ticket it claims),
-- each hold lasting lease from now, or {0, hint, joined} when it holds
-- none: hint is how many ms to wait before polling again (0 in try
-- mode), joined the ticket's place in the longest of its lines when this
-- call joined them (0 for a heartbeat and in try mode). In wait mode a
-- fourth element follows: the server's time in us when the call ran.
--
-- All or none: a call never leaves the caller holding some of the locks.
-- A ticket is granted only when it heads every one of its lines and none
-- of its locks is held (ticket_ready), so the oldest ticket is never
-- passed, and a ticket holds nothing while it waits.
--
-- A re-sent call answers as the first did: a grant made by the first is
-- claimed (every hold records the ticket), and a join made by the first
-- is found in line and becomes a heartbeat.
--
-- Handing free locks to the waiters at their heads, on the way, may
-- publish; a refused PUBLISH is answered as in acquire.lua.

local owner = ARGV[1]
local entry = ARGV[2]
local lease = tonumber(ARGV[3])
local waiter_ttl = tonumber(ARGV[4])
local mode = ARGV[5]

local locks = {}
for i = 1, #KEYS - 3, 4 do
  locks[#locks + 1] = lock_keys(KEYS[i])
end

local function granted(tokens)
  local reply = {1}
  for i, token in ipairs(tokens) do
    reply[i + 1] = tonumber(token)
  end
  return reply
end

-- 1. Every lock was given to this ticket (a hand-over, or this very call
--    re-sent): claim it, with the full lease from now. When only some of
--    them still are (the others' holds ran out before the claim), give
--    those back: the ticket's grant is lost, and the call goes on as a
--    fresh one.
local tokens, mine, free = {}, 0, {}
for i, l in ipairs(locks) do
  local hold = redis.call('HMGET', l.hold, 'owner', 'entry', 'token')
  free[i] = not hold[1]
  if hold[1] == owner and hold[2] == entry then
    mine = mine + 1
    tokens[i] = hold[3]
  end
end
if mine == #locks then
  for _, l in ipairs(locks) do
    redis.call('PEXPIRE', l.hold, lease)
  end
  return granted(tokens)
end
if mine > 0 then
  free = nil -- the give-backs may hand the locks to others
  for i, l in ipairs(locks) do
    if tokens[i] then
      if redis.call('HINCRBY', l.hold, 'count', -1) > 0 then
        redis.call('HDEL', l.hold, 'entry') -- other levels of a shared owner
      else
        redis.call('DEL', l.hold)
        hand_over(l, nil, l.hold .. ':wake')
      end
    end
  end
end

local now = now_ms()

-- 2. Try: every lock free with nobody live in its line.
if mode == 'try' then
  for _, l in ipairs(locks) do
    if redis.call('EXISTS', l.hold) == 1 or prune(l, now) then
      return finish({0, 0, 0})
    end
  end
  local fresh = {}
  for i, l in ipairs(locks) do
    fresh[i] = take(l, owner, entry, lease, now)
  end
  return finish(granted(fresh))
end

-- 3. Wait: keep the ticket's place in every line (a heartbeat), or join
--    every line at its end, then take every lock, for the full lease, if
--    the ticket is ready.
--
--    The ticket keeps its places only while its key is there; else it
--    left every line (a grant, a cancel) or is dead (its key expired with
--    it, and it may already be pruned from some lines but not from
--    others). It then leaves each line it is still in, and joins every
--    one anew. So the places of a ticket in its lines are always those
--    one call gave it, and two tickets stand in the same order in every
--    line they share: a ticket that rejoined some lines and kept its old
--    place in others could stand behind another in one line and ahead of
--    it in another, each would head a line the other waits in, and
--    neither would ever be granted. (A ticket new to every line writes
--    nothing before it joins, so that a full server refuses it.)
--
--    A ticket that joins every line writes its key: the time it joined,
--    then its locks' hash keys (see lib.lua); its time of joining is in
--    no lock's joined set.
local key = ticket_key(locks[1], entry)
local present = redis.call('EXISTS', key) == 1
local joined = 0
for _, l in ipairs(locks) do
  local place
  if present then
    place = join(l, entry, now, waiter_ttl)
  else
    -- Join the line at its end: the deadline first, added only if the
    -- ticket has none there; one it has is a place it must leave first.
    -- (A ticket new to the line then writes first what may grow memory,
    -- so that a full server refuses it, as join does.)
    if redis.call('ZADD', l.deadline, 'NX', now + waiter_ttl, entry) == 0 then
      leave(l, entry)
      redis.call('ZADD', l.deadline, now + waiter_ttl, entry)
    end
    place = redis.call('RPUSH', l.queue, entry)
  end
  joined = math.max(joined, place)
end
if not present then
  local list = {string.format('%d', now)}
  for i, l in ipairs(locks) do
    list[i + 1] = l.hold
  end
  redis.call('RPUSH', key, unpack(list))
end
redis.call('PEXPIRE', key, waiter_ttl)
local ready, handed = ticket_ready(locks, entry, now, nil, free)
if ready then
  return finish(granted(grant_ticket(locks, entry, now, lease)))
end
-- The hint reads the holds only (the locks found held, when nothing was
-- handed over on the way and nothing given back).
local hint
if handed or not free then
  hint = poll_hint(locks, waiter_ttl)
else
  local held = {}
  for i, l in ipairs(locks) do
    if not free[i] then
      held[#held + 1] = l
    end
  end
  hint = poll_hint(held, waiter_ttl)
end
return finish({0, hint, joined, clock_us or now * 1000})
