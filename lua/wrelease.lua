-- wrelease.lua: give up one level of a weighted hold; when the hold is
-- over (or a RWMutex's last write level goes while it still reads: a
-- downgrade), grant the waiters from the head that now fit.
--
-- KEYS[1..5]  the weighted lock's keys (see "Weighted locks" in lib.lua)
-- KEYS[6]     P:{N}:<kind>:call:<call id>  receipt of this call
-- ARGV[1]     owner id
-- ARGV[2]     lease in ms for the levels that remain; 0 keeps the expiry
-- ARGV[3]     wake channel P:{N}:<kind>:wake
-- ARGV[4]     receipt TTL in ms
-- ARGV[5]     "x" to give up a write level, "s" a read level (or a
--             Semaphore's hold)
-- ARGV[6]     tag of the Client that releases ('' for none)
--
-- Returns the owner's levels of that kind left (0: that hold is over), or
-- -1 when the owner holds no level of it; or {count, wake message...}
-- when waiters of the releasing Client (ARGV[6]) were granted, to which
-- nothing was published: the Client hands each its message (a local
-- hand-off; see grant_heads in lib.lua). A re-sent call answers what the
-- first one answered (its receipt, which keeps the messages too, joined
-- with newlines: an owner id has no control character). When a grant's
-- PUBLISH is refused the call still does every write, and replies with
-- an error that starts with "NOPERM " (see lib.lua) in place of its
-- reply; the waiters of the releasing Client then learn of their grants
-- at their next poll.
--
-- On a full server its first write is one that cannot grow memory, so
-- that every write after it goes through: the holder's HDEL when the hold
-- is over, else the receipt's DEL (allow_full).

local kept = receipt(KEYS[6])
if kept then
  local count, messages = string.match(kept, '^(%d+) (.+)$')
  if not messages then
    return tonumber(kept)
  end
  local reply = {tonumber(count)}
  for message in string.gmatch(messages, '[^\n]+') do
    reply[#reply + 1] = message
  end
  return reply
end

local owner = ARGV[1]
local excl = ARGV[5] == 'x'
local SK = weighted_keys(LOCK, KEYS[5])
local now = now_ms()
local h = weighted_load(SK, owner)
if not h or (excl and h.excl == 0) or (not excl and h.shared == 0) then
  return -1
end
-- While no lease has ended, a holder's has not (each holder has a lease,
-- and each lease a holder), so the owner's need not be read, nor anyone
-- pruned after the release: a count answers that, where reading leases
-- would have their scores formatted and parsed.
local ended = redis.call('ZCOUNT', SK.holders, '-inf', string.format('%d', now)) > 0
if ended then
  local expiry = redis.call('ZSCORE', SK.holders, owner)
  if not expiry or tonumber(expiry) <= now then
    return -1
  end
end
SK.nonempty = true

local count
if excl then
  h.excl = h.excl - 1
  count = h.excl
else
  h.shared = h.shared - 1
  count = h.shared
end
if h.excl == 0 and h.shared == 0 then
  drop_holder(SK, owner, h)
  -- A weight still held is a holder left, with its lease.
  SK.nonempty = SK.held > 0
else
  allow_full(KEYS[6])
  if excl and h.excl == 0 then
    -- A downgrade: the write hold is over, its read levels remain.
    add_held(SK, 1 - h.weight)
    h.weight = 1
  end
  put_holder(SK, owner, h)
  local lease = tonumber(ARGV[2])
  if lease > 0 then
    set_lease(SK, owner, lease, now)
  end
end
if ended then
  prune_holders(SK, now)
end
local own = ARGV[6]
if own == '' then
  own = nil
end
local _, _, _, wakes = grant_heads(SK, now, ARGV[3], nil, own)
keep_alive(SK, now)
if wakes then
  keep_receipt(KEYS[6], string.format('%d ', count) .. table.concat(wakes, '\n'), ARGV[4])
  table.insert(wakes, 1, count)
  return finish(wakes)
end
keep_receipt(KEYS[6], string.format('%d', count), ARGV[4])
return finish(count)
