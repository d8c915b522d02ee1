-- qlib.lua: the helpers of the quorum lock's scripts (qtry, qjoin,
-- qcancel, qrelease, qcommit, qforce), on top of lib.lua.
--
-- This file is not run on its own: fairlock prepends lib.lua and this
-- file to each quorum script, and to no other, so that the scripts of a
-- lock of one server do not carry these helpers.
--
-- Quorum locks: a lock held on N independent masters, which counts
-- while a majority of them hold it for one Lock call (see "Quorum locks"
-- in docs/algorithm.md). Each master runs these scripts on its own keys
-- of the lock, under the base P:{N}:q, given to every script as:
--
--   KEYS[1]  P:{N}:q           hash: owner, count, token, entry of the
--                              hold, its ticket, and inquired (the head
--                              the holder was last asked to yield to)
--   KEYS[2]  P:{N}:q:queue     zset: waiter entry -> its ticket, an
--                              ordered line (see join)
--   KEYS[3]  P:{N}:q:deadline  zset: entry -> its waiter deadline (ms)
--   KEYS[4]  P:{N}:q:token     the token counter K (see next_token)
--   KEYS[5]  P:{N}:q:ticket    the largest ticket written here, C
--
-- and, computed from KEYS[1], the waiters' times of joining
-- P:{N}:q:joined, as a Mutex's, the tombstone P:{N}:q:gone:<waiter id> of
-- a Lock call that gave up or released (a join of it that arrives late is
-- refused), and receipts P:{N}:q:call:<call id> as a Mutex's.
--
-- A Lock call draws a ticket once: above every C its first round (the
-- doorway) read from a majority, and above every master clock it read
-- (in us). A join writes its ticket into C (the bakery's write-back), so
-- a later doorway that reaches a majority reads it, and draws a larger
-- ticket. The line is ordered by (ticket, entry) on every master alike.
-- When a holder here has a larger key than the live head, the head may
-- be blocked by a holder that has no majority: the holder is asked to
-- yield (inquire), and a waiter holding a minority gives its hold back
-- (the yield of qjoin) and keeps its place by ticket.
--
-- ARGV of every quorum script that reads the clock ends with the skew in
-- us (0 in use; tests step one master's clock with it), read by
-- quorum_lock.

-- quorum_lock returns the lock's keys, sets the clock's skew from
-- ARGV[skew_at], and keeps counters at least keep ms (see next_token;
-- a token committed from another master's clock is kept, besides, until
-- this master's clock has passed it: see raise).
local function quorum_lock(skew_at, keep)
  clock_skew_us = tonumber(ARGV[skew_at] or '0') or 0
  return {hold = KEYS[1], queue = KEYS[2], deadline = KEYS[3], token = KEYS[4], ticket = KEYS[5],
    joined = KEYS[1] .. ':joined', ordered = true, keep = keep}
end

-- gone_key returns the key of the tombstone of entry's Lock call.
local function gone_key(lk, entry)
  return lk.hold .. ':gone:' .. string.match(entry, '^(%x+):')
end

-- bury writes the tombstone of entry's Lock call, for ttl ms.
local function bury(lk, entry, ttl)
  redis.call('SET', gone_key(lk, entry), '1', 'PX', math.max(ttl, 1))
end

-- buried reports whether entry's Lock call has gone.
local function buried(lk, entry)
  return redis.call('EXISTS', gone_key(lk, entry)) == 1
end

-- key_less reports whether the key (ticket t1, entry e1) comes before
-- (t2, e2): tickets by number, then entries by their bytes, as a zset
-- orders its members (Lua's own string order follows the locale).
local function key_less(t1, e1, t2, e2)
  if t1 ~= t2 then
    return t1 < t2
  end
  for i = 1, math.min(#e1, #e2) do
    local a, b = string.byte(e1, i), string.byte(e2, i)
    if a ~= b then
      return a < b
    end
  end
  return #e1 < #e2
end

-- raise sets the counter at key to at least value (a decimal string), to
-- last keep ms from now (a waiter TTL at least), and until this master's
-- clock term has passed it (outlast: the value may come from another
-- master's clock, however far ahead): the write-backs of tickets into C
-- and of tokens into K.
local function raise(key, value, now, keep)
  local cur = redis.call('GET', key)
  if not cur or tonumber(cur) < tonumber(value) then
    cur = value
  end
  redis.call('SET', key, cur, 'PX', math.max(now + math.max(keep, 1), outlast(cur)) - now)
end

-- quorum_hold returns the hold here as a table, or nil.
local function quorum_hold(lk)
  local h = redis.call('HMGET', lk.hold, 'owner', 'count', 'token', 'entry', 'ticket', 'inquired')
  if not h[1] then
    return nil
  end
  return {owner = h[1], count = tonumber(h[2] or '0'), token = h[3] or '0', entry = h[4] or '',
    ticket = tonumber(h[5] or '') or math.huge, inquired = h[6]}
end

-- blocked reports whether a live waiter with a smaller key than the hold
-- h heads the line, and returns that head.
local function blocked(lk, h, now)
  local head = prune(lk, now)
  if not head then
    return false, nil
  end
  local t = tonumber(redis.call('ZSCORE', lk.queue, head))
  return key_less(t, head, h.ticket, h.entry), head
end

-- quorum_hand_over gives the free lock to the live head of the line (the
-- smallest key), which holds it for its lease, but no longer than its
-- waiter deadline, and records the head's ticket in the hold. Its wake
-- message goes on the head's channel of the wake channel.
local function quorum_hand_over(lk, now, channel)
  if redis.call('EXISTS', lk.hold) == 1 then
    return
  end
  local ticket
  grant_from_head(lk, now, function(head)
    ticket = redis.call('ZSCORE', lk.queue, head)
    return 'last'
  end, function(head, deadline, at)
    local owner, lease = parse_entry(head)
    local token = take(lk, owner, head, math.min(lease, deadline - at), at)
    redis.call('HSET', lk.hold, 'ticket', ticket)
    wake(channel, head, token, at)
  end)
end

-- inquire asks the holder h here to yield when a smaller key heads the
-- line, once per head: it tells the holder (tell in lib.lua: its entry
-- alone, no token, on its channel), which wakes it to join again and
-- learn that a smaller key waits. A holder with a majority ignores it. Returns
-- whether a smaller key waits.
local function inquire(lk, h, now, channel)
  local lower, head = blocked(lk, h, now)
  if lower and h.inquired ~= head then
    redis.call('HSET', lk.hold, 'inquired', head)
    tell(channel, h.entry)
  end
  return lower
end

-- settle runs after every change of a quorum lock: the free lock goes to
-- the head, and a holder that blocks a smaller key is asked to yield.
-- Returns the hold after that (nil: none), and whether a smaller key
-- waits behind it.
local function settle(lk, now, channel)
  quorum_hand_over(lk, now, channel)
  local h = quorum_hold(lk)
  if not h then
    return nil, false
  end
  return h, inquire(lk, h, now, channel)
end

-- counter returns the value at a counter's key, as a decimal string.
local function counter(key)
  return redis.call('GET', key) or '0'
end
