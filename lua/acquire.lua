-- acquire.lua: take the lock, re-enter it, or wait in line for it.
--
-- KEYS[1..4]  the lock's keys (see lib.lua)
-- KEYS[5]     P:{N}:call:<call id>  receipt of this call
-- ARGV[1]     owner id
-- ARGV[2]     waiter entry of this Lock call (see lib.lua)
-- ARGV[3]     lease in ms: the hold's expiry after the call; 0 keeps the
--             current expiry of a re-entered hold (a fixed lease is never
--             extended by re-entry)
-- ARGV[4]     waiter TTL in ms: how long a queued waiter keeps its place
--             without polling again
-- ARGV[5]     mode: "try" never enqueues; "wait" enqueues or heartbeats;
--             "reenter" only adds a level to a hold the owner still has
-- ARGV[6]     wake channel P:{N}:wake
-- ARGV[7]     receipt TTL in ms
-- ARGV[8]     an election candidate's value (see is_candidate in
--             lib.lua); absent for other entries
--
-- Returns {1, token, count} when the caller holds the lock after the call
-- (a fresh grant, a re-entry, or a hand-over it is claiming), or
-- {0, hint, joined} when it does not: hint is how many ms the caller should
-- wait before it polls again (0 in try mode), and joined is the entry's
-- place in line (the queue's length, 1 for the head) when this call
-- appended it to the queue (0 for a heartbeat of a waiter already in
-- line, and in try mode). In wait mode a fourth element follows: the
-- server's time in us when the call ran, which the waiter sets beside
-- the time a wake message carries (see wake_target in lib.lua).
--
-- When the lock is free while another waiter heads the queue, the call
-- hands it to that waiter and publishes its wake message. If the server
-- refuses that PUBLISH, the call still does everything else it would have
-- done (the head is the owner; in wait mode the caller is in line with a
-- fresh deadline), and replies with an error that starts with "NOPERM "
-- (see lib.lua) in place of {0, hint, joined}: a call that hands over is
-- never granted itself. Nor is an election's candidate whose own grant
-- the server refuses to tell on the election's channel (see tell_leader
-- in lib.lua): the error takes the place of {1, token, 1}, and the
-- client gives the grant back.
--
-- A call whose reply was lost may be re-sent by the client library, and
-- must then answer what it answered the first time. A grant needs nothing
-- for that: the hold records the entry it was given to, and a call under
-- that entry claims it (step 1), with the same token and count. A
-- re-entry leaves a receipt under its own call id, and a re-sent
-- re-entry that finds its receipt answers from it, so a level is never
-- counted twice.
--
-- On a full server (maxmemory reached; see lib.lua) a re-entry, a claim,
-- a hand-over to the head and a heartbeat of a waiter already in line go
-- through; a fresh grant to a caller nobody waited before and a waiter
-- joining the line are refused with the server's OOM error, having
-- written nothing.

local owner = ARGV[1]
local entry = ARGV[2]
local lease = tonumber(ARGV[3])
local waiter_ttl = tonumber(ARGV[4])
local mode = ARGV[5]
local channel = ARGV[6]
campaign(entry, ARGV[8])


-- 0. The path most calls take: the first attempt of a Lock (try mode)
--    finds the lock free and nobody waiting (neither the hold nor the line
--    exists), and is granted at once, reading no more. Polls of a waiting
--    Lock, which mostly find the lock held, do not pay for the check.
if mode == 'try' and redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
  return finish({1, tonumber(take(LOCK, owner, entry, lease, now_ms())), 1})
end

local hold = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token', 'entry')
local holder = hold[1]

-- 1. The caller's owner holds the lock.
if holder == owner then
  if hold[4] ~= entry then
    -- A re-entry; if this very call ran before, answer what it did.
    local kept = receipt(KEYS[5])
    if kept then
      local token, count = string.match(kept, '^(%d+):(%d+)$')
      return {1, tonumber(token), tonumber(count)}
    end
  end
  leave(LOCK, entry)
  if lease > 0 then
    redis.call('PEXPIRE', KEYS[1], lease)
  end
  if hold[4] == entry then
    -- The lock was given to this very call's entry: a hand-over (the
    -- waiter missed the push, or polled before it arrived) or this call's
    -- own grant, re-sent. Claim it; the count stays.
    return {1, tonumber(hold[3]), tonumber(hold[2])}
  end
  -- Re-entry: one more level of the same hold. token is the decimal
  -- string of the hash field, never a number: see take in lib.lua.
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  keep_receipt(KEYS[5], hold[3] .. ':' .. count, ARGV[7])
  return {1, tonumber(hold[3]), count}
end

-- A re-entry whose owner no longer holds the lock must not turn into a
-- fresh grant: the hold it meant to extend is gone (its lease was lost).
-- A free lock still goes to the live head of the queue, as in step 2.
if mode == 'reenter' then
  if not holder then
    hand_over(LOCK, nil, channel)
  end
  return finish({0, 0, 0})
end

-- 2. The lock is free: grant it to the caller when nobody live is ahead of
--    it, or else hand it to the live head of the queue. The clock is read
--    once, when first needed.
local now = nil
if not holder then
  local head, deadline
  head, deadline, now = prune(LOCK, nil)
  if not head or head == entry then
    if head then
      line_pop(LOCK, head)
    end
    return finish({1, tonumber(take(LOCK, owner, entry, lease, now or now_ms())), 1})
  end
  hand_over(LOCK, now, channel)
end

-- 3. Someone else holds the lock.
if mode ~= 'wait' then
  return finish({0, 0, 0})
end
now = now or now_ms()
local joined = join(LOCK, entry, now, waiter_ttl)

return finish({0, poll_hint({LOCK}, waiter_ttl), joined, clock_us or now * 1000})
