-- qtry.lua: a quorum lock's first round on one master (the doorway),
-- and a re-entry.
--
-- KEYS[1..5]  the lock's keys on this master (see qlib.lua)
-- KEYS[6]     P:{N}:q:call:<call id>  receipt of this call
-- ARGV[1]     owner id
-- ARGV[2]     waiter entry of this Lock call (see lib.lua)
-- ARGV[3]     lease in ms: the hold's expiry after the call; 0 keeps the
--             expiry of a re-entered hold (a fixed lease)
-- ARGV[4]     waiter TTL in ms
-- ARGV[5]     wake channel P:{N}:q:wake
-- ARGV[6]     mode: "try" takes a free lock nobody waits for; "reenter"
--             only adds a level to a hold the owner has
-- ARGV[7]     receipt TTL in ms
-- ARGV[8]     clock skew in us (0; see qlib.lua)
-- ARGV[9]     an election candidate's value (see is_candidate in
--             lib.lua); absent for other entries
--
-- Returns {state, token, count, C, now, K}: state 1 when the owner holds
-- here after the call (a fresh grant, a grant to this entry it claims, or
-- one more level, count, of a hold it had), 0 when it does not, -1 when
-- the entry's Lock call is gone (a tombstone); token the hold's token, C
-- the largest ticket written here, now the server's time in us (with the
-- skew), K the token counter; numbers as decimal strings.
--
-- A re-entry leaves a receipt, so that a re-sent call counts once. A
-- fresh try never passes a live waiter (no barging); when the lock is
-- free while a live waiter heads the line, it is handed to that waiter.

local owner = ARGV[1]
local entry = ARGV[2]
local lease = tonumber(ARGV[3])
local waiter_ttl = tonumber(ARGV[4])
local channel = ARGV[5]
local mode = ARGV[6]
local receipt_ttl = tonumber(ARGV[7])
local lk = quorum_lock(8, waiter_ttl)
campaign(entry, ARGV[9])
local now = now_ms()
local got = redis.call('MGET', KEYS[6], gone_key(lk, entry), lk.ticket, lk.token)
load_counter(lk, got[4])

local function answer(state, token, count)
  return {state, token, count, got[3] or '0', string.format('%d', clock_us), counter(lk)}
end

if got[1] then
  local token, count = string.match(got[1], '^(%d+) (%d+)$')
  return answer(1, token, tonumber(count))
end
if got[2] then
  return answer(-1, '0', 0)
end
local h = quorum_hold(lk)
if h and h.owner == owner then
  if h.entry == entry and mode == 'try' then
    -- A grant to this very call: a try sent again, or a hand-over.
    if lease > 0 then
      redis.call('PEXPIRE', lk.hold, lease)
    end
    return answer(1, h.token, h.count)
  end
  local count = redis.call('HINCRBY', lk.hold, 'count', 1)
  if lease > 0 then
    redis.call('PEXPIRE', lk.hold, lease)
  end
  keep_receipt(KEYS[6], h.token .. ' ' .. count, receipt_ttl)
  return answer(1, h.token, count)
end
if h or mode ~= 'try' then
  return answer(0, '0', 0)
end
if line_front(lk, now) then
  settle(lk, nil, now, channel)
  return finish(answer(0, '0', 0))
end
local token = draw_token(lk, lease, now)
local value = granted_value(lk, entry)
if value then
  redis.call('HSET', lk.hold, 'owner', owner, 'count', 1, 'token', token, 'entry', entry,
    'since', string.format('%d', now), 'expires', string.format('%d', now + lease), 'value', value, 'vseq', '0',
    'term', '0')
  tell_leader(lk)
else
  redis.call('HSET', lk.hold, 'owner', owner, 'count', 1, 'token', token, 'entry', entry,
    'since', string.format('%d', now), 'expires', string.format('%d', now + lease))
end
redis.call('PEXPIRE', lk.hold, lease)
return finish(answer(1, token, 1))
