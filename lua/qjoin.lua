-- qjoin.lua: a quorum lock's waiter joins the line of one master, keeps
-- its place there (a heartbeat), or yields a hold it has here.
--
-- KEYS[1..5]  the lock's keys on this master (see qlib.lua)
-- ARGV[1]     owner id
-- ARGV[2]     waiter entry of this Lock call
-- ARGV[3]     lease in ms of the hold the entry is to have
-- ARGV[4]     waiter TTL in ms
-- ARGV[5]     wake channel P:{N}:q:wake
-- ARGV[6]     the entry's ticket (decimal)
-- ARGV[7]     token of a hold of the entry here to yield, or "0"
-- ARGV[8]     clock skew in us (0; see qlib.lua)
-- ARGV[9]     an election candidate's value (see is_candidate in
--             lib.lua); absent for other entries
--
-- Returns {state, token, lower, hint, K, now}: state 1 when the entry
-- holds here after the call (with token), 0 when it waits in line, -1
-- when its Lock call is gone (a tombstone); lower 1 when it holds here
-- while a live waiter with a smaller key heads the line; hint how many ms
-- to wait before the next join; K the token counter; now the server's
-- time in us (with the skew); numbers as decimal strings, but lower and
-- hint.
--
-- Steps: the ticket is written back into C; a hold of the entry under
-- the yield token is given up (Maekawa's yield) and the entry goes back
-- in line by its ticket; a hold of the entry here lasts at least
-- min(lease, waiter TTL) more; else the entry joins, or moves its
-- deadline (its place is its ticket's, so one pruned while away comes
-- back to the same place). Then the free lock goes to the head, and a
-- holder blocking a smaller key is asked to yield (settle): by the
-- entry's own join only when its key is below the holder's (a join
-- behind the holder changes nothing before it; each waiter before the
-- holder asks at its own joins).

local owner = ARGV[1]
local entry = ARGV[2]
local lease = tonumber(ARGV[3])
local waiter_ttl = tonumber(ARGV[4])
local channel = ARGV[5]
local ticket = ARGV[6]
local yield_token = ARGV[7]
local lk = quorum_lock(8, waiter_ttl)
campaign(entry, ARGV[9])
local now = now_ms()
local got = redis.call('MGET', gone_key(lk, entry), lk.ticket, lk.token)
load_counter(lk, got[3])

if got[1] then
  return {-1, '0', 0, 1, counter(lk), string.format('%d', clock_us)}
end
raise(lk.ticket, tonumber(got[2] or '0'), ticket, now, waiter_ttl)
local h = quorum_hold(lk)
if h and h.entry == entry and yield_token ~= '0' and h.token == yield_token then
  redis.call('DEL', lk.hold)
  tell_ended(lk, entry)
  h = nil
end
local lower = false
if h and h.entry == entry then
  redis.call('HSET', lk.hold, 'ticket', ticket)
  h.ticket = tonumber(ticket)
  local keep = math.min(lease, waiter_ttl)
  if redis.call('PTTL', lk.hold) < keep then
    redis.call('PEXPIRE', lk.hold, keep)
  end
  lower = inquire(lk, h, now, channel)
else
  queue_join(lk, entry, now, waiter_ttl, ticket)
  if not h then
    h = settle(lk, nil, now, channel)
  elseif key_less(tonumber(ticket), entry, h.ticket, h.entry) then
    -- The entry's key is below the holder's: it may head the line now.
    -- A larger key changes nothing before the holder.
    inquire(lk, h, now, channel)
  end
end
local reply
if h and h.entry == entry then
  reply = {1, h.token, lower and 1 or 0, math.max(math.floor(math.min(lease, waiter_ttl) / 3), 1)}
else
  reply = {0, '0', 0, quorum_hint(lk, h, now, waiter_ttl)}
end
reply[5] = counter(lk)
reply[6] = string.format('%d', clock_us)
return finish(reply)
