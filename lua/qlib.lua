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
--                              hold, since, its ticket, expires (see
--                              quorum_hold), and inquired (the head the
--                              holder was last asked to yield to)
--   KEYS[2]  P:{N}:q:queue     zset: waiter entry -> its ticket, an
--                              ordered line (see join)
--   KEYS[3]  P:{N}:q:deadline  zset: entry -> its waiter deadline (ms)
--   KEYS[4]  P:{N}:q:token     the token counter K (see next_token)
--   KEYS[5]  P:{N}:q:ticket    the largest ticket written here, C
--
-- and, computed from KEYS[1], the tombstone P:{N}:q:gone:<waiter id> of
-- a Lock call that gave up or released (a join of it that arrives late is
-- refused), and receipts P:{N}:q:call:<call id> as a Mutex's. A quorum
-- lock keeps no times of joining (a Mutex's P:{N}:joined): a waiter's
-- ticket, its score in the line, is drawn from the masters' clocks (in
-- us) at its doorway, and tells those who look at the lock how long it
-- has waited.
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
-- this master's clock has passed it: see raise). k is K, once a script
-- has read it (see load_counter), as a number, 0 when there is none.
local function quorum_lock(skew_at, keep)
  clock_skew_us = tonumber(ARGV[skew_at] or '0') or 0
  return {hold = KEYS[1], queue = KEYS[2], deadline = KEYS[3], token = KEYS[4], ticket = KEYS[5],
    joined = nil, ordered = true, keep = keep, k = nil}
end

-- Every redis.call costs a script far more than the command's own work,
-- so the scripts read what they need of the lock's strings in one MGET
-- (a receipt, a tombstone, C and K: keys of one hash slot), keep K once
-- read (lk.k), and write each key once.

-- gone_key returns the key of the tombstone of entry's Lock call.
local function gone_key(lk, entry)
  return lk.hold .. ':gone:' .. string.match(entry, '^(%x+):')
end

-- bury writes the tombstone of entry's Lock call, for ttl ms.
local function bury(lk, entry, ttl)
  redis.call('SET', gone_key(lk, entry), '1', 'PX', math.max(ttl, 1))
end

-- load_counter keeps value, K as GET or MGET answered it, in lk.k.
local function load_counter(lk, value)
  lk.k = tonumber(value or '0') or 0
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

-- raise sets the counter at key, whose value is cur (a number, 0 when
-- there is none, as the script read it), to at least value (a decimal
-- string), to last keep ms from now (a waiter TTL at least), and until
-- this master's clock term has passed it (outlast: the value may come
-- from another master's clock, however far ahead): the write-backs of
-- tickets into C and of tokens into K. One SET, as PX counts from the
-- SET itself, never an expiry already past. Returns the counter's value,
-- a number.
local function raise(key, cur, value, now, keep)
  local v = value
  if cur >= tonumber(value) then
    v = string.format('%d', cur)
  end
  redis.call('SET', key, v, 'PX', math.max(now + math.max(keep, 1), outlast(v)) - now)
  return tonumber(v)
end

-- draw_token draws a fresh fencing token of lk for a hold that lasts ttl
-- ms from now: K + 1 while there is a K, and now * 1000, the clock term,
-- when there is none (a Mutex's next_token takes the larger of the two
-- always). The token becomes K, kept max(ttl, lk.keep) ms and until the
-- clock term has passed it, from the K the script read (lk.k; read here
-- when it has not), in one SET. Masters whose K is equal draw equal
-- tokens for the same hold, which makes its commit a no-op the holder
-- can skip (fair/qhold.go); tokens drawn so stay below the clock term
-- while fewer than 1,000 grants a ms come, so a K that expired, or was
-- lost with its master's data, is replaced by a larger one. The expiry is absolute (PXAT) on Redis 7 and later,
-- which may be past already on a master whose clock the caller skewed:
-- K is then gone, and lk.k is forgotten. Returns the token, a decimal
-- string.
local function draw_token(lk, ttl, now)
  if not lk.k then
    load_counter(lk, redis.call('GET', lk.token))
  end
  local keep = math.max(ttl, lk.keep or 1)
  local token
  if lk.k > 0 then
    token = string.format('%d', lk.k + 1)
  else
    token = string.format('%d', now * 1000)
  end
  local at = math.max(now + keep, outlast(token))
  if redis.REDIS_VERSION then
    redis.call('SET', lk.token, token, 'PXAT', string.format('%d', at))
  else
    redis.call('SET', lk.token, token, 'PX', string.format('%d', at - now))
  end
  lk.k = nil
  return token
end

-- counter returns K as a decimal string: lk.k, or read when the script
-- has not (or has drawn a token since: see draw_token).
local function counter(lk)
  if not lk.k then
    load_counter(lk, redis.call('GET', lk.token))
  end
  return string.format('%d', lk.k)
end

-- quorum_hold returns the hold here as a table, or nil. Its expires is
-- the time (ms, the scripts' clock) its grant set it to expire at, which
-- later calls only move later (renewals, re-entries, joins): a lower
-- bound of its expiry, 0 when none was written (see quorum_hint).
local function quorum_hold(lk)
  local h = redis.call('HMGET', lk.hold, 'owner', 'count', 'token', 'entry', 'ticket', 'inquired', 'expires')
  if not h[1] then
    return nil
  end
  return {owner = h[1], count = tonumber(h[2] or '0'), token = h[3] or '0', entry = h[4] or '',
    ticket = tonumber(h[5] or '') or math.huge, inquired = h[6], expires = tonumber(h[7] or '0') or 0}
end

-- quorum_hint returns how many ms a waiter should wait before it joins
-- again, as poll_hint does (when the hold h expires, which publishes
-- nothing, and at least every third of the waiter TTL), from the expiry
-- its grant recorded (h.expires) while that is still ahead: a PTTL less
-- per join. Once it has passed while the hold is still there (renewed
-- since), the key's own expiry is read.
local function quorum_hint(lk, h, now, waiter_ttl)
  local hint = math.floor(waiter_ttl / 3)
  if h then
    local left = h.expires - now
    if left <= 0 then
      left = redis.call('PTTL', lk.hold)
    end
    if left >= 0 and left + 1 < hint then
      hint = left + 1
    end
  end
  return math.max(hint, 1)
end

-- line_front returns the live head of the line, its ticket and its
-- deadline, or nil when nobody lives in line: it drops dead heads on the
-- way, as prune does (lib.lua; no MultiLock ticket is kept under a
-- quorum lock's keys, so an entry that looks like one is dead), with the
-- head's ticket read by the same ZRANGE.
local function line_front(lk, now)
  while true do
    local r = redis.call('ZRANGE', lk.queue, 0, 0, 'WITHSCORES')
    local head = r[1]
    if not head then
      return nil
    end
    local deadline = redis.call('ZSCORE', lk.deadline, head)
    if deadline and tonumber(deadline) > now and parse_entry(head) and not is_ticket(head) then
      return head, tonumber(r[2]), tonumber(deadline)
    end
    line_pop(lk, head)
    forget_value(lk, head)
  end
end

-- blocked reports whether a live waiter with a smaller key than the hold
-- h heads the line, and returns that head.
local function blocked(lk, h, now)
  local head, ticket = line_front(lk, now)
  if not head then
    return false, nil
  end
  return key_less(ticket, head, h.ticket, h.entry), head
end

-- queue_join puts entry in the line by its ticket with the waiter
-- deadline now + ttl, or, for an entry already in line, moves its
-- deadline there (a heartbeat): lib.lua's join on an ordered line, which
-- no caller here asks for its place, and with no time of joining (see
-- the top of this file). ZADD NX adds an entry that is not in line, and
-- keeps the place of one that is, whatever ticket it names.
--
-- A candidate's value (see is_candidate in lib.lua) joins the values
-- beside the line with its entry, as lib.lua's join writes it.
local function queue_join(lk, entry, now, ttl, ticket)
  if redis.call('ZADD', lk.queue, 'NX', ticket, entry) == 1 and candidacy and candidacy.entry == entry then
    redis.call('HSET', values_key(lk), entry, candidacy.value)
  end
  redis.call('ZADD', lk.deadline, now + ttl, entry)
end

-- A grant here takes a candidate's value as lib.lua's take does
-- (granted_value), and is told on the election's channel: on a quorum, a
-- master's hold is a leadership once a majority of the masters hold for
-- the same entry, which the observers read. A candidate's hold that ends
-- here (a release, a cancel, a yield, a forced removal) is told too
-- (tell_ended), and a hand-over that follows tells of its own grant.

-- quorum_hand_over gives the free lock to the live head of the line (the
-- smallest key), which holds it for its lease, but no longer than its
-- waiter deadline, with its ticket recorded in the hold; its wake message
-- goes on the head's channel of the wake channel. The head leaves the
-- line first (ZPOPMIN, which cannot grow memory: see allow_full), and a
-- dead head leaves it untold. ended says that the hash still holds a
-- hold that has just ended (a release's): the new hold's HSET writes
-- over it, every field of it (inquired emptied), and when nobody lives
-- in line the hash is deleted; a DEL less per hand-over. Returns the new
-- hold as quorum_hold does, or nil.
local function quorum_hand_over(lk, now, channel, ended)
  while true do
    local r = redis.call('ZPOPMIN', lk.queue)
    local head = r[1]
    if not head then
      if ended then
        redis.call('DEL', lk.hold)
      end
      return nil
    end
    local deadline = tonumber(redis.call('ZSCORE', lk.deadline, head) or '0')
    redis.call('ZREM', lk.deadline, head)
    local owner, lease = parse_entry(head)
    if deadline > now and owner and not is_ticket(head) then
      local ttl = math.min(lease, deadline - now)
      local token = draw_token(lk, ttl, now)
      local expires = string.format('%d', now + ttl)
      local value = granted_value(lk, head)
      if value then
        -- A candidate's: 'value' beside the others, 'vseq' 0, the
        -- sequence number of no Proclaim yet, and 'term' 0, no term
        -- committed yet (see qcommit.lua), over an ended leadership's
        -- ('inquired' emptied, as below).
        redis.call('HSET', lk.hold, 'owner', owner, 'count', 1, 'token', token, 'entry', head,
          'since', string.format('%d', now), 'ticket', r[2], 'expires', expires, 'inquired', '', 'value', value,
          'vseq', '0', 'term', '0')
        tell_leader(lk)
      elseif ended then
        redis.call('HSET', lk.hold, 'owner', owner, 'count', 1, 'token', token, 'entry', head,
          'since', string.format('%d', now), 'ticket', r[2], 'expires', expires, 'inquired', '')
      else
        redis.call('HSET', lk.hold, 'owner', owner, 'count', 1, 'token', token, 'entry', head,
          'since', string.format('%d', now), 'ticket', r[2], 'expires', expires)
      end
      redis.call('PEXPIRE', lk.hold, ttl)
      wake(channel, head, token, now)
      if ttl <= 0 then
        return nil
      end
      return {owner = owner, count = 1, token = token, entry = head, ticket = tonumber(r[2]), inquired = false,
        expires = now + ttl}
    end
    forget_value(lk, head)
  end
end

-- inquire asks the holder h here to yield when a smaller key heads the
-- line, once per head: it tells the holder (tell in lib.lua: its entry
-- alone, no token, on its channel), which wakes it to join again and
-- learn that a smaller key waits. A holder with a majority ignores it.
-- Returns whether a smaller key waits.
local function inquire(lk, h, now, channel)
  local lower, head = blocked(lk, h, now)
  if lower and h.inquired ~= head then
    redis.call('HSET', lk.hold, 'inquired', head)
    h.inquired = head
    tell(channel, h.entry)
  end
  return lower
end

-- settle runs after every change of a quorum lock whose hold is then h
-- (nil: none): the free lock goes to the head, and a holder that blocks
-- a smaller key is asked to yield; a holder just handed the lock is the
-- head, which nobody waits before. Returns the hold after that (nil:
-- none), and whether a smaller key waits behind it.
local function settle(lk, h, now, channel)
  if not h then
    return quorum_hand_over(lk, now, channel), false
  end
  return h, inquire(lk, h, now, channel)
end
