-- lib.lua: helpers shared by every fairlock script.
--
-- This file is not run on its own. It reaches the server in two ways (see
-- library.go): prepended to each operation script (acquire, release,
-- cancel, ...), so that every script is one self-contained EVAL body; and
-- once, as the head of a Redis 7 function library, in which each
-- operation is a function and these helpers are defined when the library
-- is loaded, not at every call. Each run starts with begin (at the end of
-- this file), which sets everything a run changes, so that the two ways
-- run alike. Every script that includes it receives the keys of one lock
-- in the same order:
--
--   KEYS[1]  P:{N}           hash: owner, count, token, entry and since
--                            (the server time, ms, it was granted) of
--                            the hold
--   KEYS[2]  P:{N}:queue     list of waiter entries, oldest first
--   KEYS[3]  P:{N}:deadline  zset: entry -> server time (ms) by which that
--                            waiter must poll again
--   KEYS[4]  P:{N}:token     fencing counter: the latest token (see take)
--
-- and, computed from KEYS[1], P:{N}:joined, a zset: entry -> the server
-- time (ms) it joined the line, for those who look at the lock (it
-- decides nothing; see join).
--
-- A waiter entry is "<waiter id>:<lease ms>:<owner id>": the waiter id is
-- 16 hex characters unique to one waiting Lock call, followed by the
-- 8 hex characters of the waiting Client's tag and one of the wake format
-- version (see wake_target); the lease is the one its hold will have, and
-- the owner id is the rest (it may contain ':').
--
-- Time is the server's clock (TIME) only. Scripts that read TIME and then
-- write must be replicated as effects, as Redis 5 and later (the oldest
-- fairlock runs on) and every function do.
--
-- A script that hands the lock over publishes a wake message. When the
-- server refuses that PUBLISH (a Redis 6+ ACL user without permission on
-- the wake channel), the script still does every write it would have
-- done, and replies with an error that starts with "NOPERM " instead of
-- its normal reply (see finish). Each script's header says which of its
-- replies that replaces.
--
-- The wake message goes out with publish_command, PUBLISH in the scripts
-- as written here. For a Redis Cluster of Redis 7 or later fairlock runs
-- a second set of the same scripts in which that one line says SPUBLISH
-- (a sharded publish: it reaches only the nodes of the slot's shard,
-- where PUBLISH is broadcast to every node of the cluster). Nothing else
-- differs between the two sets.

-- The helpers that read or write a lock take its keys as a table, lk:
-- {hold = KEYS[1], queue = KEYS[2], deadline = KEYS[3], token = KEYS[4],
-- joined = KEYS[1]:joined} for the lock the script was called for
-- (LOCK), or the same keys of another lock made from its hash key by
-- lock_keys.
local function lock_keys(base)
  return {hold = base, queue = base .. ':queue', deadline = base .. ':deadline', token = base .. ':token',
    joined = base .. ':joined'}
end

-- LOCK is the keys of the lock the script was called for (set by begin).
local LOCK = nil

-- clock_us is the server's time in microseconds when this script run
-- last read the clock (now_ms), else nil.
local clock_us = nil

-- clock_skew_us is added to every reading of the clock: 0, but for the
-- quorum scripts, whose caller may name a skew so that tests can step one
-- master's clock where a real step cannot be made (see qlib.lua).
local clock_skew_us = 0

-- now_ms returns the server's time in milliseconds, and keeps it to the
-- microsecond in clock_us.
--
-- A word on numbers, which the scripts run on every call. Turning text
-- into a number and back costs more than most of what a script does: in
-- Lua 5.1, tonumber(s) parses s twice (strtod), where arithmetic on s
-- parses it once; a number given to redis.call is printed with "%.17g",
-- about three times the work of string.format('%d'), and a number joined
-- with '..' with "%.14g". So the helpers pass text to redis.call (a
-- constant as '0', a time through string.format('%d')), and parse a
-- reply once, by arithmetic where it is known to be a number's text.
local function now_ms()
  local t = redis.call('TIME')
  clock_us = t[1] * 1000000 + t[2] + clock_skew_us
  return math.floor(clock_us / 1000)
end

-- A full server is one at its maxmemory under the noeviction policy
-- (the only policy fairlock runs on). Redis then refuses a script at its
-- first write when that command may grow memory (SET, HSET, HINCRBY,
-- RPUSH, ZADD, ...), and lets every later write through, so as never to
-- stop a script half-way; a write that cannot grow memory (DEL, HDEL,
-- LPOP, ZREM, LREM, PEXPIRE) is never refused. What each script does on a
-- full server follows from the order of its writes, and is chosen: what
-- ends or hands over a hold (release, cancel, forceunlock, a hand-over
-- made by acquire), what keeps a hold (renew, a re-entry, a claim) and a
-- waiter's heartbeat first write something that cannot grow memory, and
-- go through; only what adds to the lock (a fresh grant to a caller
-- nobody waited before, a waiter joining the line) is refused, with the
-- server's OOM error, having written nothing.
--
-- allow_full writes nothing, but makes the script's first write one
-- that cannot grow memory, so that a full server lets the rest through:
-- a DEL of key, which the caller has just read and found absent.
local function allow_full(absent)
  redis.call('DEL', absent)
end

-- parse_entry returns the owner id and the lease (ms) of a waiter entry,
-- or nil when the entry is malformed.
local function parse_entry(entry)
  local lease, owner = string.match(entry, '^%x+:(%d+):(.+)$')
  if not owner then
    return nil
  end
  return owner, tonumber(lease)
end

-- well_formed reports whether entry is a waiter entry parse_entry reads,
-- without making the strings it would return.
local function well_formed(entry)
  return string.find(entry, '^%x+:%d+:.') ~= nil
end

-- A MultiLock whose locks live on one server joins all their lines at
-- once with one entry, a ticket: its waiter id ends with the ticket
-- version (2, after the tag; see wake_target). The ticket's one key,
-- P:ticket:<waiter id> (ticket_key, under the prefix P of its locks), is
-- a list: the server time (ms) the ticket joined its lines, then the hash
-- keys of all its locks, in key order. The ticket is granted every lock
-- at once, when it heads every line and none of the locks is held (see
-- ticket_ready); until then it holds none of them, and a lock it heads
-- stays free: nobody passes it. A ticket whose key is gone (expired with
-- its waiter) is dead. A ticket's time of joining is kept in its key
-- alone, not in the joined sets of its locks (see join).
-- TICKET_PATTERN matches a ticket's entry: 24 hex digits of waiter id
-- and tag, then the version. (Written out: a function library's code runs
-- at load without the string library.)
local TICKET_PATTERN = '^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x2:'

-- is_ticket reports whether entry is a MultiLock's ticket.
local function is_ticket(entry)
  return string.find(entry, TICKET_PATTERN) ~= nil
end

-- An Election is a Mutex whose waiters are candidates: its entries end
-- their waiter id with the candidate version (3, after the tag; see
-- wake_target), and each carries a value, the one its candidate
-- campaigns with. A candidate's value waits beside the line, in the hash
-- P:{N}:values (values_key: entry -> value), from the call that joins it
-- to the line until it leaves the line (leave, or prune for a dead
-- head) or is granted: take moves the value into the hold (field
-- 'value'), and the hold is the leadership. Every change of an
-- election's leadership (a grant, a new value, a hold that ends with
-- nobody to take it) publishes "leader" on P:{N}:leader (tell_leader),
-- which the observers of the election watch; they read the hold when
-- told. A lease that runs out publishes nothing. A Mutex's entries are
-- never candidates: what an election adds costs a Mutex one
-- string.find per grant and per leaving waiter.
local CANDIDATE_PATTERN = '^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x3:'

-- is_candidate reports whether entry is an election's candidate.
local function is_candidate(entry)
  return string.find(entry, CANDIDATE_PATTERN) ~= nil
end

-- candidacy is the entry and value of the candidate whose call this run
-- is (acquire.lua sets it from its arguments), else nil (begin clears
-- it): its value is written beside the line when it joins, and taken
-- from here, not from the hash, when the call itself is granted.
local candidacy = nil

-- values_key returns the key of lk's candidates' values.
local function values_key(lk)
  return lk.hold .. ':values'
end

-- campaign makes the call of entry the candidacy of this run when its
-- value (an argument; nil when absent) came with it and entry is a
-- candidate's.
local function campaign(entry, value)
  if value and is_candidate(entry) then
    candidacy = {entry = entry, value = value}
  end
end

-- granted_value returns the value a grant to entry gives its hold, and
-- takes it from beside the line: a candidate's (from the call's own
-- argument when the call is the candidate's, else from the hash of
-- values, '' when missing there), or nil for any other entry.
local function granted_value(lk, entry)
  if not is_candidate(entry) then
    return nil
  end
  local value
  if candidacy and candidacy.entry == entry then
    value = candidacy.value
  else
    value = redis.call('HGET', values_key(lk), entry) or ''
  end
  redis.call('HDEL', values_key(lk), entry)
  return value
end

-- forget_value drops the value of entry, a candidate that leaves lk's
-- line without being granted.
local function forget_value(lk, entry)
  if is_candidate(entry) then
    redis.call('HDEL', values_key(lk), entry)
  end
end

-- keeps_joined reports whether lk's joined set holds the time of joining
-- of entry: a quorum lock keeps none (lk.joined is nil; see qlib.lua),
-- and a ticket's is in its key instead.
local function keeps_joined(lk, entry)
  return lk.joined ~= nil and not is_ticket(entry)
end

-- ticket_key returns the key of the ticket entry, one of whose locks is
-- lk: P:ticket:<waiter id>, P being the prefix of lk's keys (which holds
-- no brace).
local function ticket_key(lk, entry)
  return string.match(lk.hold, '^([^{]*):{') .. ':ticket:' .. string.match(entry, '^(%x+):')
end

-- A line comes in two shapes. A lock of one server keeps a list, in the
-- order its waiters joined. A quorum lock (see qlib.lua) keeps a zset,
-- lk.ordered: entry -> the ticket its caller drew, which is one order on
-- every master, (ticket, entry) ascending, as a zset orders equal scores
-- by their members' bytes. join, leave, line_head, line_pop and prune
-- are the only helpers here that know which (qlib.lua has its own for
-- the zset, besides leave and line_pop).

-- join puts entry at the end of lk's line with the waiter deadline now +
-- ttl (ms on the server's clock), or, for an entry already in line,
-- moves its deadline there (a heartbeat). In an ordered line, entry takes
-- its place by ticket instead of at the end. It returns the entry's place
-- in line when it joined (1 for the head), 0 for a heartbeat. An entry
-- that joins has now written as its time of joining (lk.joined), which
-- only those who look at the lock read: how long each waiter has waited.
-- A ticket's is kept in its key instead (written by multiacquire.lua;
-- see keeps_joined).
--
-- A heartbeat grows nothing, and keeps the waiter's place on a full
-- server too: the ZREM, which cannot grow memory, goes first (see
-- allow_full), and the ZADD puts the entry back with its new deadline.
local function join(lk, entry, now, ttl, ticket)
  local joined = 0
  if not redis.call('ZSCORE', lk.deadline, entry) then
    if lk.ordered then
      redis.call('ZADD', lk.queue, ticket, entry)
      joined = redis.call('ZRANK', lk.queue, entry) + 1
    else
      joined = redis.call('RPUSH', lk.queue, entry)
    end
    if keeps_joined(lk, entry) then
      redis.call('ZADD', lk.joined, string.format('%d', now), entry)
    end
    if candidacy and candidacy.entry == entry then
      redis.call('HSET', values_key(lk), entry, candidacy.value)
    end
  else
    redis.call('ZREM', lk.deadline, entry)
  end
  redis.call('ZADD', lk.deadline, string.format('%d', now + ttl), entry)
  return joined
end

-- leave takes entry out of lk's line. A list's LREM is the only step
-- whose cost grows with the line: paid once, by a waiter that gives up.
-- A line without times of joining (lk.joined nil: a quorum lock's) has
-- none to remove.
local function leave(lk, entry)
  if redis.call('ZREM', lk.deadline, entry) == 1 then
    if lk.ordered then
      redis.call('ZREM', lk.queue, entry)
    else
      redis.call('LREM', lk.queue, 1, entry)
    end
    if keeps_joined(lk, entry) then
      redis.call('ZREM', lk.joined, entry)
    end
    forget_value(lk, entry)
  end
end

-- line_head returns the first entry of lk's line, or nil; line_pop takes
-- the line's first entry, head, out of it, with its deadline and time of
-- joining (see keeps_joined).
local function line_head(lk)
  if lk.ordered then
    return redis.call('ZRANGE', lk.queue, '0', '0')[1]
  end
  return redis.call('LINDEX', lk.queue, '0') or nil
end

local function line_pop(lk, head)
  if lk.ordered then
    redis.call('ZREM', lk.queue, head)
  else
    redis.call('LPOP', lk.queue)
  end
  redis.call('ZREM', lk.deadline, head)
  if keeps_joined(lk, head) then
    redis.call('ZREM', lk.joined, head)
  end
end

-- poll_hint returns how many ms a waiter in the lines of locks should
-- wait before it polls again: when the first of their holds expires
-- (expiry publishes nothing), and at least every third of the waiter TTL
-- (the heartbeat that keeps its place).
local function poll_hint(locks, waiter_ttl)
  local hint = math.floor(waiter_ttl / 3)
  for _, l in ipairs(locks) do
    local pttl = redis.call('PTTL', l.hold)
    if pttl >= 0 and pttl + 1 < hint then
      hint = pttl + 1
    end
  end
  return math.max(hint, 1)
end

-- prune drops waiters from the head of the queue while the head has no
-- deadline, a deadline at or before now, or is malformed, and returns the
-- live head, its deadline and now, or nil when the queue is empty. Each
-- waiter is dropped at most once, so the loop is amortised O(1) per call.
-- now is the server's time in ms, or nil: the clock is then read only if
-- the queue has a head, so a call that finds nobody waiting never pays
-- for TIME.
--
-- A ticket's deadline is read as any waiter's. Its key expires with it,
-- and one whose key has expired first (PEXPIRE counts from the start
-- of the script on Redis 7.2 and later, a ms or so before its TIME) is
-- dropped by the hand-over that finds it (see hand_over).
local function prune(lk, now)
  while true do
    local head = line_head(lk)
    if not head then
      return nil, nil, now
    end
    now = now or now_ms()
    local deadline = redis.call('ZSCORE', lk.deadline, head)
    deadline = deadline and deadline + 0
    if deadline and deadline > now and well_formed(head) then
      return head, deadline, now
    end
    line_pop(lk, head)
    forget_value(lk, head)
  end
end

-- outlast returns the first ms of the server's clock whose clock term
-- (ms * 1000) is above value, a counter's value in us: a counter at value
-- must not expire before then, or a token drawn from the clock alone
-- after it expired could be at or below value.
local function outlast(value)
  return math.floor(tonumber(value) / 1000) + 1
end

-- next_token draws a fresh fencing token of lk for a hold that lasts
-- ttl ms from now (the server's time in ms), and returns it as a decimal
-- string. take (a Mutex's grant) and grant_weighted (a Semaphore's or a
-- RWMutex's) draw every token through it.
--
-- The token is max(counter + 1, now * 1000), and it becomes the counter.
-- The clock term keeps tokens rising where the counter alone would go
-- back: after a restart without persistence (the counter is gone) and
-- after a failover to a replica whose counter is stale, as long as the
-- new server's clock reads later than the old one's did; 1000 grants per
-- ms of a lock can go by before tokens run ahead of the clock. Tokens are
-- doubles here, exact below 2^53 (the clock term stays below it until the
-- year 2255). Never tostring() a token or join it with '..': Lua 5.1
-- prints 14 significant digits ("1.8e+15"). string.format('%d') prints
-- every digit, and only that text is written, published or stored.
--
-- The counter expires with the hold it was taken for: at now + ttl on the
-- server's clock (at least 1 ms after now, or lk.keep ms for a quorum
-- lock's, see qlib.lua), so a name nobody uses keeps
-- no key once its hold and receipts are gone. Tokens still rise: every
-- token issued at now is below (now + 1) * 1000, and a grant that finds
-- the counter gone runs at now + 1 or later, so its clock term alone is
-- above them (see "Fencing tokens" in docs/algorithm.md). A counter above
-- the clock term (a quorum lock's, raised to a token drawn on a master
-- whose clock reads later; a clock that went back) expires no sooner than
-- outlast says, when this server's clock term has passed it. The expiry is an
-- absolute time: from Redis 7.2 on, a PX inside a script counts from the
-- script's start, which may be ms before now. Redis 7 and later (which
-- tell scripts their version) are given SET ... PXAT; older servers are
-- given PX, which they count from the SET itself, after now was read.
--
-- On Redis 7 and later the counter is read and written by one SET ... GET:
-- it writes the clock term and answers the counter it replaced; only when
-- that counter was at or above the clock term (a second grant in one ms,
-- a clock that went back) is the counter + 1 written over it.
local function next_token(lk, ttl, now)
  local keep = math.max(ttl, lk.keep or 1)
  local token
  if redis.REDIS_VERSION then
    local at = string.format('%d', now + keep)
    local clock = string.format('%d', now * 1000)
    local counter = (redis.call('SET', lk.token, clock, 'PXAT', at, 'GET') or 0) + 0
    token = clock
    if counter + 1 > now * 1000 then
      token = string.format('%d', counter + 1)
      at = string.format('%d', math.max(now + keep, outlast(token)))
      redis.call('SET', lk.token, token, 'PXAT', at)
    end
  else
    local counter = tonumber(redis.call('GET', lk.token) or '0')
    token = string.format('%d', math.max(counter + 1, now * 1000))
    redis.call('SET', lk.token, token, 'PX', string.format('%d', math.max(keep, outlast(token) - now)))
  end
  return token
end

-- taken, when a release of several holds runs (release.lua sets it),
-- holds the hash key of every lock that take granted in this run, so
-- that the release hands none of those over again; nil otherwise (begin
-- clears it), and take then records nothing.
local taken = nil

-- take makes owner the holder of the free lock under a fresh fencing
-- token (next_token), records which waiter entry the hold was given to
-- and since when, and sets the hold to expire after ttl ms. now is the
-- server's time in ms. It returns the token as a decimal string.
--
-- A candidate's grant (see is_candidate) is a leadership: its value moves
-- from beside the line into the hold, and the election's observers are
-- told (tell_leader, defined below).
local tell_leader
local function take(lk, owner, entry, ttl, now)
  if taken then
    taken[lk.hold] = true
  end
  local token = next_token(lk, ttl, now)
  local since = string.format('%d', now)
  local value = granted_value(lk, entry)
  if value then
    redis.call('HSET', lk.hold, 'owner', owner, 'count', 1, 'token', token, 'entry', entry, 'since', since,
      'value', value)
    tell_leader(lk)
  else
    redis.call('HSET', lk.hold, 'owner', owner, 'count', 1, 'token', token, 'entry', entry, 'since', since)
  end
  redis.call('PEXPIRE', lk.hold, ttl)
  return token
end

-- publish_command is the command that sends wake messages: PUBLISH, or
-- SPUBLISH in the sharded set of the scripts (see the top of this file).
local publish_command = 'PUBLISH'

-- refused is the NOPERM error message once the server refused a PUBLISH
-- of this script run, else nil. See finish.
local refused = nil

-- publish sends a wake message. It must not fail the script half-way:
-- the state change it announces is already written (writes before a
-- script error are kept), so a refusal (an ACL user without permission
-- on the channel, or without the publish command) is caught with pcall
-- and kept for finish, and the script completes every write it would
-- have done.
local function publish(channel, message)
  local res = redis.pcall(publish_command, channel, message)
  if type(res) == 'table' and res.err then
    refused = 'NOPERM fairlock: state changed, but ' .. publish_command .. ' to ' ..
      channel .. ' was refused: ' .. res.err
  end
end

-- tell_leader publishes "leader" on the leader channel of lk, an
-- election (P:{N}:leader): its leadership changed.
tell_leader = function(lk)
  publish(lk.hold .. ':leader', 'leader')
end

-- tell_ended tells the election's observers that a hold of lk, given to
-- entry (false or nil when not known), ended, when it was a candidate's:
-- its leadership.
local function tell_ended(lk, entry)
  if entry and is_candidate(entry) then
    tell_leader(lk)
  end
end

-- finish returns a script's reply, or in its place, when a PUBLISH of this
-- run was refused, an error reply that starts with "NOPERM ": every write
-- of the script was done, only the wake message was not sent.
local function finish(reply)
  if refused then
    return redis.error_reply(refused)
  end
  return reply
end

-- wake_target returns the channel a hand-over to entry is published on,
-- whether its wake message carries the time of the hand-over, and the
-- tag of the entry's Client (nil for an entry without one).
--
-- The channel is the lock's wake channel followed by ':<tag>' when the
-- entry's waiter id holds the tag of the Client that waits (16 + 8 hex
-- characters, then at most one more), so that only that Client receives
-- the message; the wake channel itself for a waiter id without a tag (a
-- client from before tags).
--
-- A waiter id of 16 + 8 + 1 hex characters (the last one a wake format
-- version, 1 and up) says that its Client reads a wake message with the
-- time of the hand-over, "<entry> <token> <server time in us>"; the
-- others are sent "<entry> <token>", which is all that clients from
-- before it read. Those clients' scripts find no tag in such an id, and
-- publish its hand-overs on the lock's wake channel, which its Client
-- watches too.
-- (16 hex characters, then the tag's 8 and the version; written out, as
-- TICKET_PATTERN.)
local WAKE_PATTERN = '^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x(%x%x%x%x%x%x%x%x)(%x?):'

local function wake_target(channel, entry)
  local tag, version = string.match(entry, WAKE_PATTERN)
  if tag then
    return channel .. ':' .. tag, version ~= '', tag
  end
  return channel, false, nil
end

-- hand_over and wake are defined below; the ticket helpers call them.
local hand_over, wake

-- ticket_locks returns the keys of every lock of the ticket entry, one of
-- which is lk, in key order, as its key lists them; nil when the ticket is
-- dead.
local function ticket_locks(lk, entry)
  local bases = redis.call('LRANGE', ticket_key(lk, entry), 1, -1)
  if #bases == 0 then
    return nil
  end
  local locks = {}
  for i, base in ipairs(bases) do
    locks[i] = lock_keys(base)
  end
  return locks
end

-- ticket_ready reports whether the ticket entry can be granted now: it
-- heads the line of each of its locks, and none of them is held. When one
-- is held it looks no further: the ticket is not ready, whatever the
-- others are. Else it looks at the lines in key order and stops at the
-- first that the ticket does not head, pruning those it passes; when the
-- live head of the line it stops at is a waiter of that lock alone, the
-- lock is handed to it (it was free only because nobody had handed it
-- over yet: a holder's lease ran out). now is the server's time in ms.
--
-- known is a lock of the ticket that the caller found free with the live
-- ticket at its head, or nil: it is not looked at again. free, when not
-- nil, says for each lock (by its index in locks) whether the caller
-- found it free in this run, nothing having changed it since: no hold is
-- read then. A line that the live ticket heads is not pruned either: the
-- ticket's deadline is one in all its lines (one call writes them all),
-- so it lives in each.
--
-- It also returns whether it handed a lock over.
local function ticket_ready(locks, entry, now, known, free)
  local others = {}
  for i, l in ipairs(locks) do
    if not known or l.hold ~= known.hold then
      if free and not free[i] then
        return false, false
      end
      others[#others + 1] = l
    end
  end
  if not free and #others > 0 then
    local holds = {}
    for i, l in ipairs(others) do
      holds[i] = l.hold
    end
    if redis.call('EXISTS', unpack(holds)) > 0 then
      return false, false
    end
  end
  for _, l in ipairs(others) do
    local head = redis.call('LINDEX', l.queue, '0')
    if head ~= entry and head then
      local deadline = redis.call('ZSCORE', l.deadline, head)
      if not (deadline and deadline + 0 > now and well_formed(head)) then
        head = prune(l, now)
      end
    end
    if head ~= entry then
      if head and not is_ticket(head) then
        hand_over(l, now, l.hold .. ':wake')
        return false, true
      end
      return false, false
    end
  end
  return true, false
end

-- grant_ticket gives every lock of the ticket entry, which heads each of
-- their lines, to its owner, each under a fresh token, and drops the
-- ticket's key. It returns the tokens, in the order of locks.
--
-- lease is the holds' TTL in ms when the ticket's own call takes them:
-- its waiter is there to hold them, as a Mutex's poll that finds the lock
-- free is given its full lease. For a hand-over, which may reach a waiter
-- that is gone, lease is nil: each hold lasts the entry's lease, but no
-- longer than the ticket's waiter deadline, deadline (one in all its
-- lines; see hand_over).
local function grant_ticket(locks, entry, now, lease, deadline)
  local owner, entry_lease = parse_entry(entry)
  local ttl = lease or math.min(entry_lease, deadline - now)
  local tokens = {}
  for i, l in ipairs(locks) do
    line_pop(l, entry)
    tokens[i] = take(l, owner, entry, ttl, now)
  end
  redis.call('DEL', ticket_key(locks[1], entry))
  return tokens
end

-- hand_over_ticket grants the ticket entry, the live head of the free
-- lock lk with the waiter deadline deadline, every one of its locks (as
-- ticket_locks read them) if it
-- is ready (see ticket_ready), and publishes its wake message on the wake
-- channel of its first lock, with every lock's token, joined with commas
-- in key order ("<entry> <token>,<token>... <us>"), so that its Client
-- holds them all without a poll. Returns the entry when it was granted,
-- else nil.
local function hand_over_ticket(locks, lk, entry, deadline, now)
  if not ticket_ready(locks, entry, now, lk) then
    return nil
  end
  local tokens = grant_ticket(locks, entry, now, nil, deadline)
  wake(locks[1].hold .. ':wake', entry, table.concat(tokens, ','), now)
  return entry
end

-- grant_from_head is the one walk of a line from its head, which every
-- grant to a waiter makes: a Mutex's hand_over and a weighted lock's
-- grant_heads are both made of it, so the order in which a line is served
-- is decided by join, prune and this walk alone. For each live head of
-- lk's line, oldest first, offer(head, deadline, now) answers what to do
-- with it:
--   'grant'  the head leaves the line, grant(head, deadline, now) is
--            called, and the walk goes on with the next head;
--   'last'   the same, and the walk ends;
--   'drop'   the head leaves the line ungranted, and the walk goes on;
--   'stop'   the head stays, and the walk ends.
-- A head leaves the line before it is granted, so that on a full server
-- the walk's first write is one that cannot grow memory (see allow_full).
-- now is the server's time in ms, or nil (see prune).
local function grant_from_head(lk, now, offer, grant)
  while true do
    local head, deadline
    head, deadline, now = prune(lk, now)
    if not head then
      return
    end
    local what = offer(head, deadline, now)
    if what == 'stop' then
      return
    end
    line_pop(lk, head)
    if what ~= 'drop' then
      grant(head, deadline, now)
      if what == 'last' then
        return
      end
    end
  end
end

-- hand_over gives the free lock to the live head of the queue, if any: the
-- head becomes the holder on the spot (so nobody can barge in between two
-- holders) and is told by wake. The hold lasts its lease, but no longer
-- than the head's waiter deadline: a dead head's hold expires like any
-- dead waiter, and a live head with a watchdog renews it before that runs
-- out. now is the server's time in ms, or nil (see prune).
--
-- own is the tag of the Client that runs the script, or nil. When the
-- head waits in that very Client, nothing is published: the wake message
-- is returned instead, for the Client to hand to its waiter itself (a
-- local hand-off). Returns the head's entry and, for a local hand-off,
-- its wake message; nil when nobody lives in line.
--
-- A head that is a ticket gets the lock only together with every other
-- lock of the ticket, once it is ready (see hand_over_ticket); until then
-- the lock stays free, and nil is returned. A ticket whose key has
-- expired is dead: it leaves the line, and the next head is served.
hand_over = function(lk, now, channel, own)
  local granted, message
  grant_from_head(lk, now, function(head, deadline, at)
    if is_ticket(head) then
      local locks = ticket_locks(lk, head)
      if not locks then
        return 'drop' -- dead: its key expired
      end
      granted = hand_over_ticket(locks, lk, head, deadline, at)
      return 'stop'
    end
    return 'last'
  end, function(head, deadline, at)
    local owner, lease = parse_entry(head)
    local token = take(lk, owner, head, math.min(lease, deadline - at), at)
    granted, message = head, wake(channel, head, token, at, own)
  end)
  return granted, message
end

-- hand_on is hand_over for a lock whose hold, given to entry (false or
-- nil when not known), has just ended: when that hold was an election's
-- leadership and nobody takes the lock over, the election's observers
-- are told that it has no leader (a grant tells them itself, see take).
local function hand_on(lk, entry, now, channel, own)
  local granted, message = hand_over(lk, now, channel, own)
  if not granted then
    tell_ended(lk, entry)
  end
  return granted, message
end

-- wake tells the waiter of entry that it was granted under token at now
-- (the server's time in ms): it publishes "<entry> <token>", followed by
-- " <server time in us>" when the entry's Client reads it (see
-- wake_target), on the entry's channel of the lock's wake channel
-- channel. When own is the tag of the entry's Client (the one that runs
-- the script), nothing is published and the message is returned instead,
-- for a local hand-off; otherwise nil.
wake = function(channel, entry, token, now, own)
  local target, timed, tag = wake_target(channel, entry)
  local message = entry .. ' ' .. token
  if timed then
    message = message .. ' ' .. string.format('%d', clock_us or now * 1000)
  end
  if own and tag == own then
    return message
  end
  publish(target, message)
  return nil
end

-- tell publishes entry alone on its channel of the lock's wake channel
-- channel (see wake_target): a wake that carries no grant, which every
-- client reads as "look now", so that the entry's waiter polls at once
-- and its poll answers what changed (a refusal, a quorum holder's call to
-- yield) where it would otherwise learn it a poll interval later.
local function tell(channel, entry)
  publish((wake_target(channel, entry)), entry)
end

-- revoke tells the Client that holds under entry, the entry a hold was
-- given to, that the hold is gone before its holder gave it up (a forced
-- unlock): it publishes "held:<entry>" on the entry's channel of the
-- lock's wake channel channel (see wake_target). The Client watches that
-- id while it holds, and ends the hold at once instead of at its next
-- renewal; no waiter has such an id, so any other client ignores it.
-- Nothing is told for a hold without an entry (false, from HGET).
local function revoke(channel, entry)
  if entry then
    publish((wake_target(channel, entry)), 'held:' .. entry)
  end
end

-- A call that changes a hold in a way it cannot tell from the hold
-- afterwards (a re-entry, a release) leaves a receipt: its answer, kept
-- under the key of its call id for a while, so that the same call sent
-- again by the client library (its reply was lost) answers what it
-- answered the first time instead of counting twice. A grant needs none:
-- the hold records the entry it was given to, and a call under that entry
-- claims it.

-- receipt returns the answer kept under key, or nil when the call has not
-- run (or its receipt has expired).
local function receipt(key)
  return redis.call('GET', key) or nil
end

-- keep_receipt keeps answer under key for ttl ms.
local function keep_receipt(key, answer, ttl)
  redis.call('SET', key, answer, 'PX', ttl)
end

-- Weighted locks: a Semaphore and a RWMutex. Many holders may hold one
-- at a time, each with a weight, as long as the weights add up to no more
-- than the capacity; their line and hand-overs are the Mutex's (join,
-- leave, prune, next_token, wake), and a release grants as many waiters
-- from the head as now fit (grant_heads). A RWMutex is a weighted lock of
-- capacity RW_CAPACITY whose readers weigh 1 and whose writers weigh all
-- of it. The keys of one, given to the scripts as KEYS[1..5]:
--
--   KEYS[1]  P:{N}:<kind>           hash: 'permits' (the capacity), 'used'
--                                   (the weights held), 'expires' (when
--                                   it and the holders set expire, see
--                                   keep_alive), and per holder
--                                   'o:<owner id>' -> its record (below)
--   KEYS[2]  P:{N}:<kind>:queue     the line, as a Mutex's
--   KEYS[3]  P:{N}:<kind>:deadline  the waiters' deadlines, as a Mutex's
--   KEYS[4]  P:{N}:<kind>:token     the fencing counter, as a Mutex's
--   KEYS[5]  P:{N}:<kind>:holders   zset: owner id -> the server time (ms)
--                                   at which its hold's lease ends
--
-- and P:{N}:<kind>:joined, the waiters' times of joining, as a Mutex's.
--
-- <kind> is 'sem' or 'rw', so that a Semaphore, a RWMutex and a Mutex of
-- one name are three locks. A holder's record is
-- "<weight> <shared levels> <exclusive levels> <token> <since> <entry>",
-- since the server time (ms) of its grant: a
-- Semaphore's hold is one shared level of its weight; a RWMutex's owner
-- counts its read levels (shared) and write levels (exclusive), and
-- weighs RW_CAPACITY while it has a write level, else 1. A holder whose
-- lease has ended is dropped, its weight given back, by the next script
-- that looks (prune_holders): a lease that ends publishes nothing, and
-- the waiters' poll hint is when the first lease ends.
--
-- A weighted waiter entry is "<waiter id>:<lease ms>:<weight><s|x>:<owner
-- id>", x for a writer (exclusive), s otherwise. The hash and the holders
-- set go when nothing holds and nobody waits, and otherwise expire no
-- sooner than the last lease or waiter deadline ends, and within twice
-- the longest lease or waiter TTL of the last call (keep_alive), so that
-- a name nobody uses keeps no key; the capacity is
-- stored with them, from the first grant that finds none in force. A
-- capacity, and so a weight, is at most 2^53, which the scripts count
-- exactly (see fits).
local RW_CAPACITY = 1073741824

-- weighted_keys returns sk, the keys of a weighted lock (lk's, and its
-- holders set), which also carries what the run knows of the lock, read
-- once (weighted_load) and kept up to date by the helpers below:
--   sk.cap      the stored capacity, or nil
--   sk.held     the weights held; written back to the hash field 'used' by
--               flush_used (sk.dirty: it changed since it was read)
--   sk.expires  when the hash and the holders set expire (the hash field
--               'expires'; 0 when absent)
--   sk.first    the earliest lease end in the holders set after
--               prune_holders (nil: no holder), lowered by each grant
--   sk.nonempty the holders set is known to hold a lease
--   sk.need     the latest lease end or waiter deadline the run has set
--   sk.fresh    the run added a lease to a holders set not known to hold
--               one, which then may have no expiry
--
-- sk is lk itself, with the holders set and those fields added: a table
-- less to build per run (the scripts pass LOCK, which begin makes anew
-- for every run).
local function weighted_keys(lk, holders)
  lk.holders, lk.need, lk.fresh = holders, 0, false
  return lk
end

-- parse_weighted returns the owner id, lease (as text: only a grant needs
-- its number), weight and exclusiveness of a weighted waiter entry, or
-- nil when it is malformed.
local function parse_weighted(entry)
  local lease, weight, kind, owner = string.match(entry, '^%x+:(%d+):(%d+)([sx]):(.+)$')
  if not owner then
    return nil
  end
  return owner, lease, tonumber(weight), kind == 'x'
end

-- head_weight returns the weight of a weighted waiter entry, or nil when
-- it is malformed (as parse_weighted would find it).
local function head_weight(entry)
  local weight = string.match(entry, '^%x+:%d+:(%d+)[sx]:.')
  return weight and weight + 0
end

-- parse_holder returns a holder's record rec (a string, or false when the
-- field is absent) as a table, or nil.
local function parse_holder(rec)
  if not rec then
    return nil
  end
  local weight, shared, excl, token, since, entry = string.match(rec, '^(%d+) (%d+) (%d+) (%d+) (%d+) (.+)$')
  if not entry then
    return nil
  end
  return {weight = tonumber(weight), shared = tonumber(shared), excl = tonumber(excl), token = token,
    since = since, entry = entry}
end

-- holder returns the record of owner's hold of sk as a table, or nil.
-- (The weighted scripts read the hash with HMGET only, so that their
-- users need no HGET.)
local function holder(sk, owner)
  return parse_holder(redis.call('HMGET', sk.hold, 'o:' .. owner)[1])
end

-- weighted_load reads, with one HMGET, the stored capacity, the weights
-- held and the keys' expiry of sk into sk.cap, sk.held and sk.expires,
-- and returns owner's record (see holder; nil when owner is nil).
local function weighted_load(sk, owner)
  local r
  if owner then
    r = redis.call('HMGET', sk.hold, 'permits', 'used', 'expires', 'o:' .. owner)
  else
    r = redis.call('HMGET', sk.hold, 'permits', 'used', 'expires')
  end
  sk.cap = r[1] and r[1] + 0 or nil
  sk.held = (r[2] or 0) + 0
  sk.expires = (r[3] or 0) + 0
  sk.dirty = false
  return parse_holder(r[4])
end

-- put_holder writes owner's record h.
local function put_holder(sk, owner, h)
  redis.call('HSET', sk.hold, 'o:' .. owner,
    string.format('%d %d %d ', h.weight, h.shared, h.excl) .. h.token .. ' ' .. h.since .. ' ' .. h.entry)
end

-- add_held counts n more weight held (n < 0: given back); flush_used
-- writes the count to the hash, once however many changes a run made.
-- A count that may reach 2^53 is written with '%d', never as a Lua number
-- (which Redis 6 would print with 14 digits).
local function add_held(sk, n)
  sk.held = sk.held + n
  sk.dirty = true
end

local function flush_used(sk)
  if sk.dirty then
    redis.call('HSET', sk.hold, 'used', string.format('%d', sk.held))
    sk.dirty = false
  end
end

-- fits reports whether weight fits beside the weights held, held, in the
-- capacity cap. Weights and capacities are at most 2^53 (a Semaphore's
-- MaxPermits; RW_CAPACITY is below), and Lua's numbers, doubles, hold
-- every integer up to 2^53 exactly; but not every sum of two of them:
-- 2^53 + 1 rounds to 2^53. So the room left, cap - held, which is exact,
-- is compared with the weight, never the sum with the capacity.
local function fits(weight, held, cap)
  return weight <= cap - held
end

-- drop_holder ends owner's hold h: its weight is given back.
local function drop_holder(sk, owner, h)
  redis.call('HDEL', sk.hold, 'o:' .. owner)
  redis.call('ZREM', sk.holders, owner)
  add_held(sk, -h.weight)
end

-- holds reports whether owner holds sk.
local function holds(sk, owner)
  return redis.call('HEXISTS', sk.hold, 'o:' .. owner) == 1
end

-- read_first reads the earliest lease end of sk into sk.first (nil: no
-- holder). A zset's scores come back as text that Redis formats and Lua
-- parses, so the scripts read as few as they can: one here, and none
-- where a count will do (see wrelease.lua).
local function read_first(sk)
  local r = redis.call('ZRANGE', sk.holders, '0', '0', 'WITHSCORES')
  sk.first = r[2] and r[2] + 0
end

-- prune_holders drops the holders whose lease ended at or before now, and
-- sets sk.first and sk.nonempty. Each is dropped once, so the cost is
-- amortised O(log n) per hold; a call that finds no lease ended reads the
-- earliest one only. It returns true when it dropped owner.
local function prune_holders(sk, now, owner)
  read_first(sk)
  local dropped = false
  while sk.first and sk.first <= now do
    local r = redis.call('ZRANGE', sk.holders, '0', '15', 'WITHSCORES')
    for i = 1, #r, 2 do
      if r[i + 1] + 0 > now then
        break
      end
      local o = r[i]
      local h = holder(sk, o)
      if h then
        drop_holder(sk, o, h)
      else
        redis.call('ZREM', sk.holders, o)
      end
      dropped = dropped or o == owner
    end
    read_first(sk)
  end
  sk.nonempty = sk.first ~= nil
  return dropped
end

-- The hash and the holders set expire together, at the time the hash
-- keeps in its field 'expires', which is never before the end of any
-- lease or waiter deadline. A run that sets a later one, need, moves the
-- expiry to need + (need - now): as far past it again as it is from now,
-- so that the keys' expiry moves about once per lease or waiter TTL
-- instead of at every call (where moving it costs three commands), and a
-- name nobody uses any more keeps its keys for at most twice the longest
-- lease or waiter TTL after its last call.

-- expire_at sets the hash and the holders set to expire at at, and keeps
-- at in the hash, with the weights held when they changed (flush_used).
-- Its first write, a PEXPIREAT, cannot grow memory (see allow_full).
local function expire_at(sk, at)
  at = string.format('%d', at)
  redis.call('PEXPIREAT', sk.holders, at)
  if sk.dirty then
    redis.call('HSET', sk.hold, 'used', string.format('%d', sk.held), 'expires', at)
    sk.dirty = false
  else
    redis.call('HSET', sk.hold, 'expires', at)
  end
  redis.call('PEXPIREAT', sk.hold, at)
end

-- keep_alive ends a run that changed sk: it deletes the hash and the
-- holders set when nothing is held and nobody is in line (no weight held,
-- no lease, no waiter deadline), and otherwise writes the weights held
-- (flush_used) and moves the keys' expiry past the latest lease end or
-- deadline the run set (sk.need), or, when it added the first lease to a
-- holders set, sets that set to expire with the hash.
local function keep_alive(sk, now)
  if sk.held == 0 and redis.call('ZCOUNT', sk.holders, '-inf', '+inf') == 0 and
      redis.call('ZCOUNT', sk.deadline, '-inf', '+inf') == 0 then
    redis.call('DEL', sk.hold, sk.holders)
    return
  end
  if sk.need > sk.expires then
    expire_at(sk, 2 * sk.need - now)
    return
  end
  flush_used(sk)
  if sk.fresh then
    redis.call('PEXPIREAT', sk.holders, string.format('%d', sk.expires))
  end
end

-- in_use reports whether anything holds sk or waits for it: a lease or a
-- waiter deadline after now; sk.first must be set (prune_holders). The
-- hash outlives both (see keep_alive): its expiry never moves earlier,
-- and lies past the last lease end or deadline by up to as long again;
-- and a real server keeps a key through the millisecond of its expiry.
-- The capacity it holds then is left over, and not in force: the next
-- grant stores its caller's.
local function in_use(sk, now)
  return sk.first ~= nil or redis.call('ZCOUNT', sk.deadline, string.format('(%d', now), '+inf') > 0
end

-- set_lease makes owner's hold last ttl ms from now, and returns when it
-- ends. A lease added to a holders set the run does not know to hold one
-- (sk.nonempty) marks the run's set fresh: it may have made the key,
-- which then has no expiry yet (see keep_alive).
local function set_lease(sk, owner, ttl, now)
  local ends = now + math.max(ttl, 1)
  redis.call('ZADD', sk.holders, string.format('%d', ends), owner)
  if not sk.nonempty then
    sk.fresh = true
  end
  sk.nonempty = true
  if ends > sk.need then
    sk.need = ends
  end
  return ends
end

-- grant_weighted makes owner a holder of sk with weight, as a writer when
-- excl, under a fresh token, for ttl ms from now; entry is the waiter
-- entry it was given to. Returns the token.
local function grant_weighted(sk, owner, entry, weight, excl, ttl, now)
  local token = next_token(sk, ttl, now)
  local shared, x = 1, 0
  if excl then
    shared, x = 0, 1
  end
  -- The weights held go with the record: one HSET (see flush_used).
  add_held(sk, weight)
  redis.call('HSET', sk.hold, 'o:' .. owner,
    string.format('%d %d %d ', weight, shared, x) .. token .. string.format(' %d ', now) .. entry,
    'used', string.format('%d', sk.held))
  sk.dirty = false
  local ends = set_lease(sk, owner, ttl, now)
  if not sk.first or ends < sk.first then
    sk.first = ends
  end
  return token
end

-- grant_heads grants waiters from the head of sk's line, oldest first,
-- as long as each one's weight fits beside the weights held (sk.held) in
-- the stored capacity (sk.cap): the first that does not fit stops it, so
-- that nobody passes a waiter (strict FIFO, with the head of the line
-- blocking). Each granted waiter holds for its lease, but no longer than
-- its waiter deadline (as a Mutex's hand-over), and is told by wake on
-- channel. A head whose weight is above the capacity (lowered since it
-- joined) is taken out of the line, and told (tell), so that it polls at
-- once and its poll refuses it. So is a head that fits but whose owner
-- holds already (under another entry): an owner's one record cannot keep
-- two holds, whose weights would both be counted in 'used' and only one
-- given back. A malformed head is taken out untold. now is the server's
-- time in ms.
--
-- The head the walk stops at is read for its weight alone (head_weight):
-- a walk stops at one head per call, and most calls (a join, a release
-- that grants one waiter) stop at one that does not fit; its owner is
-- looked up only when it is to be granted.
--
-- Every weight is at least 1, so while the weights held fill the
-- capacity no head fits: the walk then reads nothing of the line, and
-- ends at once, or right after the grant that fills it.
--
-- own is the tag of the Client that runs the script, or nil: a grant to a
-- waiter of that Client publishes nothing, and its wake message is
-- returned instead (a local hand-off, as hand_over's).
--
-- Returns the live head the walk stopped at (nil when the line is left
-- empty; true when it stopped on a full lock without reading the line,
-- where someone may wait); when a waiter of owner mine was granted, its
-- entry and token; and the wake messages of the grants to own's waiters,
-- in order (nil for none).
local function grant_heads(sk, now, channel, mine, own)
  local cap = sk.cap
  if not cap then
    return nil
  end
  if sk.held >= cap then
    return true
  end
  local stopped, mine_entry, mine_token, wakes
  local owner, lease, weight, excl
  grant_from_head(sk, now, function(head)
    weight = head_weight(head)
    if not weight then
      return 'drop'
    end
    if weight > cap then
      tell(channel, head)
      return 'drop'
    end
    if not fits(weight, sk.held, cap) then
      stopped = head
      return 'stop'
    end
    owner, lease, weight, excl = parse_weighted(head)
    if holds(sk, owner) then
      tell(channel, head)
      return 'drop'
    end
    if weight >= cap - sk.held then
      stopped = true
      return 'last'
    end
    return 'grant'
  end, function(head, deadline, at)
    local token = grant_weighted(sk, owner, head, weight, excl, math.min(lease + 0, deadline - at), at)
    local message = wake(channel, head, token, at, own)
    if message then
      wakes = wakes or {}
      wakes[#wakes + 1] = message
    end
    if owner == mine then
      mine_entry, mine_token = head, token
    end
  end)
  return stopped, mine_entry, mine_token, wakes
end

-- weighted_hint returns how many ms a waiter of sk should wait before it
-- polls again: when the first lease ends (sk.first, which publishes
-- nothing), and at least every third of the waiter TTL.
local function weighted_hint(sk, waiter_ttl, now)
  local hint = math.floor(waiter_ttl / 3)
  if sk.first then
    hint = math.min(hint, sk.first - now + 1)
  end
  return math.max(hint, 1)
end

-- begin starts a run: the lock the script was called for, and no clock
-- read, no skew and no refusal yet. Every variable of this file that a run
-- changes is set here: in a function library these helpers outlive a run.
local function begin()
  LOCK = {hold = KEYS[1], queue = KEYS[2], deadline = KEYS[3], token = KEYS[4], joined = KEYS[1] .. ':joined'}
  clock_us, clock_skew_us, refused, taken, candidacy = nil, 0, nil, nil, nil
end
