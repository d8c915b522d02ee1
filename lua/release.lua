-- release.lua: give up one level of a hold; at the last level, hand the
-- lock to the next live waiter. One call may release a level of several
-- holds of one server at once (a MultiLock's Unlock): KEYS and ARGV then
-- hold one group of five per hold, each as below.
--
-- KEYS[1..4]  the lock's keys (see lib.lua)
-- KEYS[5]     P:{N}:call:<call id>  receipt of this call
-- ARGV[1]     owner id
-- ARGV[2]     lease in ms for the levels that remain; 0 keeps the
--             current expiry (a fixed lease is never extended)
-- ARGV[3]     wake channel P:{N}:wake
-- ARGV[4]     receipt TTL in ms
-- ARGV[5]     tag of the Client that releases ('' for none)
--
-- Returns the levels the owner still holds (0: the hold is over), or -1
-- when the owner does not hold the lock; or {0, wake message} when the
-- lock was handed to a waiter of the releasing Client itself (ARGV[5]),
-- to which nothing was published: the Client hands it the message (see
-- hand_over in lib.lua). A re-sent call answers what the first one
-- answered (see the receipt in acquire.lua). A call of several groups
-- returns an array of those answers, one per group, in order; each
-- group keeps its own receipt, so that one group sent again alone (under
-- its call id) answers what it answered in the call of several.
--
-- At the last level the lock is handed to the next live waiter, whose
-- wake message is published. If the server refuses that PUBLISH, the call
-- still does every write (the hold is over, the waiter is the owner, the
-- receipt says 0), and replies with an error that starts with "NOPERM "
-- (see lib.lua) in place of its reply, which is then always 0: a release
-- publishes only when the hold is over. (A call of several groups that
-- is refused is answered by its groups' receipts: each group sent again
-- alone under its call id.)
--
-- A call of several groups ends every hold it ends before it hands any
-- lock over, as if they had been released at one instant: a MultiLock's
-- ticket that waits for several of them is granted them all by the first
-- hand-over that finds it, and a lock that a hand-over of this call has
-- given away is not handed over again.
--
-- It works on a full server (maxmemory reached; see lib.lua).

local answers = {}
if #KEYS > 5 then
  taken = {} -- see take in lib.lua
end
local over = {} -- the groups whose hold is over, in order
local ended = {} -- group -> the entry its hold that is over was given to

-- A call of several groups reads their receipts only when one of them is
-- there (one EXISTS of all): a call sent for the first time has none.
local receipts = #KEYS == 5
if not receipts then
  local keys = {}
  for k = 5, #KEYS, 5 do
    keys[#keys + 1] = KEYS[k]
  end
  receipts = redis.call('EXISTS', unpack(keys)) > 0
end

for g = 1, #KEYS / 5 do
  local k = 5 * (g - 1)
  local hold_key, receipt_key = KEYS[k + 1], KEYS[k + 5]
  local kept = receipts and receipt(receipt_key)
  if kept then
    local count, message = string.match(kept, '^(%d+) (.+)$')
    if message then
      answers[g] = {tonumber(count), message}
    else
      answers[g] = tonumber(kept)
    end
  else
    local hold = redis.call('HMGET', hold_key, 'owner', 'count', 'entry')
    if hold[1] ~= ARGV[k + 1] then
      answers[g] = -1
    else
      -- A release goes through on a full server (see lib.lua): refused,
      -- it would leave the lock blocked until the hold's lease ran out.
      -- So its first write is one that cannot grow memory: the DEL of
      -- the hold at the last level, the PEXPIRE of a level above it, or,
      -- for a level above the last of a fixed lease (which nothing
      -- extends), allow_full.
      local count = (tonumber(hold[2]) or 1) - 1
      if count > 0 then
        local lease = tonumber(ARGV[k + 2])
        if lease > 0 then
          redis.call('PEXPIRE', hold_key, lease)
        else
          allow_full(receipt_key)
        end
        redis.call('HINCRBY', hold_key, 'count', -1)
        keep_receipt(receipt_key, count, ARGV[k + 4])
        answers[g] = count
      else
        redis.call('DEL', hold_key)
        over[#over + 1] = g
        ended[g] = hold[3]
      end
    end
  end
end

-- The lock is never free between two holders: the next live waiter
-- becomes the owner here and is woken with its token, by pub/sub or, when
-- it waits in the releasing Client, by that Client.
for _, g in ipairs(over) do
  local k = 5 * (g - 1)
  local lk = LOCK
  if g > 1 then
    lk = lock_keys(KEYS[k + 1])
  end
  local message
  if not (taken and taken[lk.hold]) then
    local own = ARGV[k + 5]
    if own == '' then
      own = nil
    end
    local now = clock_us and math.floor(clock_us / 1000) or nil
    _, message = hand_on(lk, ended[g], now, ARGV[k + 3], own)
  end
  if message then
    keep_receipt(KEYS[k + 5], '0 ' .. message, ARGV[k + 4])
    answers[g] = {0, message}
  else
    keep_receipt(KEYS[k + 5], 0, ARGV[k + 4])
    answers[g] = 0
  end
end

if #KEYS == 5 then
  return finish(answers[1])
end
return finish(answers)
