"""The control store's Lua scripts: each touches only `{meta}`-tagged keys, so it runs
atomically on one Redis (and on one slot of a cluster). Their time is Redis's own clock."""

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# The rule chain (sidecar/invalidation/chain.py): the sidecar signs, the scripts only
# compare-and-set, so a value is written only over the exact state it was signed for.
# KEYS: epoch, rules, audit, head, dataset. ARGV: expected counter, head, dataset; the
# new epoch, its commit time, member, head; selector, reason, caller, estimate,
# channel, audit maxlen, publish command, audit tag, most lead of the time (ms).
COMMIT = (
    _NOW
    + """
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then return {0, 'epoch', now} end
if redis.call('GET', KEYS[4]) ~= ARGV[2] then return {0, 'head', now} end
if redis.call('GET', KEYS[5]) ~= ARGV[3] then return {0, 'dataset', now} end
-- The signed time must not be before the commit (a rule counts from its time on), nor
-- far after it.
local at = tonumber(ARGV[5])
if at < now or at > now + tonumber(ARGV[16]) then return {0, 'clock', now} end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local seq = 1
if #last == 2 then seq = tonumber(last[2]) + 1 end
redis.call('ZADD', KEYS[2], seq, ARGV[6])
redis.call('SET', KEYS[1], ARGV[4])
redis.call('SET', KEYS[4], ARGV[7])
local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[13], '*',
  'epoch', ARGV[4], 'time_ms', ARGV[5], 'caller', ARGV[10], 'selector', ARGV[8],
  'reason', ARGV[9], 'estimated_entries', ARGV[11], 'tag', ARGV[15])
-- PUBLISH on one Redis, SPUBLISH (a shard channel in this slot) on a cluster.
redis.call(ARGV[14], ARGV[12], ARGV[4])
return {1, id, now}
"""
)

# KEYS: dataset, anchor, head, epoch, rules, store. Everything a verification needs,
# read at one instant, with the store's clock and the fleet's rule retention. A store
# with no identity gets a new data set first, as in STATE (ARGV: its identity, head
# and anchor).
CHAIN = (
    _NOW
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[5], KEYS[4])
  redis.call('SET', KEYS[3], ARGV[2])
  redis.call('SET', KEYS[2], ARGV[3])
end
local out = {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3]),
  redis.call('GET', KEYS[4]), now, redis.call('HGET', KEYS[6], 'retention') or '0'}
for _, m in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do table.insert(out, m) end
return out
"""
)

# KEYS: epoch, rules, head, dataset. ARGV: expected head, dataset, counter; new epoch,
# new head; members to append in order.
REPUBLISH = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
if redis.call('GET', KEYS[4]) ~= ARGV[2] then return -1 end
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[3] then return -1 end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local seq = 0
if #last == 2 then seq = tonumber(last[2]) end
for i = 6, #ARGV do
  seq = seq + 1
  redis.call('ZADD', KEYS[2], seq, ARGV[i])
end
redis.call('SET', KEYS[1], ARGV[4])
redis.call('SET', KEYS[3], ARGV[5])
return #ARGV - 5
"""

# The chain signed again with a new fleet secret (rotation): every value replaced at
# once, if none changed since it was read. KEYS: dataset, anchor, head, epoch, rules.
# ARGV: expected dataset, anchor, head, counter; the new dataset, anchor, head; members.
RESEAL = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return -1 end
if (redis.call('GET', KEYS[4]) or '0') ~= ARGV[4] then return -1 end
if redis.call('ZCARD', KEYS[5]) ~= #ARGV - 7 then return -1 end
redis.call('DEL', KEYS[5])
for i = 8, #ARGV do redis.call('ZADD', KEYS[5], i - 7, ARGV[i]) end
redis.call('SET', KEYS[1], ARGV[5])
redis.call('SET', KEYS[2], ARGV[6])
redis.call('SET', KEYS[3], ARGV[7])
return #ARGV - 7
"""

# KEYS: rules, anchor, dataset. ARGV: expected anchor, dataset; new anchor; the oldest
# members, all of which must still be there.
PRUNE = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
if redis.call('GET', KEYS[3]) ~= ARGV[2] then return -1 end
for i = 4, #ARGV do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then return -1 end
end
for i = 4, #ARGV, 500 do
  redis.call('ZREM', KEYS[1], unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
redis.call('SET', KEYS[2], ARGV[3])
return #ARGV - 3
"""

HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Continuous: the member was still live when this heartbeat arrived, so no commit since
-- its last one went ahead without waiting for it (see Freshness._refresh).
local prev = redis.call('ZSCORE', KEYS[1], ARGV[1])
local continuous = 0
if prev and tonumber(prev) > now then continuous = 1 end
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(dead) do redis.call('HDEL', KEYS[2], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
local acked = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) > acked then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
-- (A Redis that lost its data restarts the counter: the sidecar raises it by
-- re-publishing, with a signed head, never here; see Freshness._recover.)
redis.call('HSETNX', KEYS[3], 'born', now)
if tonumber(ARGV[3]) > tonumber(redis.call('HGET', KEYS[3], 'max_ttl') or '0') then
  redis.call('HSET', KEYS[3], 'max_ttl', ARGV[3])
end
if tonumber(ARGV[4]) > tonumber(redis.call('HGET', KEYS[3], 'retention') or '0') then
  redis.call('HSET', KEYS[3], 'retention', ARGV[4])
end
return continuous
"""

UNCONFIRMED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local out = {}
for _, id in ipairs(live) do
  if tonumber(redis.call('HGET', KEYS[2], id) or '0') < tonumber(ARGV[1]) then
    table.insert(out, id)
  end
end
-- Members confirmed before Redis lost its data are missing from `members` but may
-- still serve hits until their ttl runs out: wait that long after the store's rebirth.
local born = tonumber(redis.call('HGET', KEYS[3], 'born') or now)
local age = now - born
local max_ttl = tonumber(redis.call('HGET', KEYS[3], 'max_ttl') or '0')
if age < max_ttl then
  table.insert(out, 'members-from-before-a-store-reset-' .. age .. 'ms-ago')
end
-- Likewise after a restart from persisted data: members live before it may not have
-- heartbeated (and re-published their rules) into the restarted store yet.
local restarted = tonumber(redis.call('HGET', KEYS[3], 'restarted') or '0')
if restarted > 0 and now - restarted < max_ttl then
  table.insert(out, 'members-from-before-a-store-restart-' .. (now - restarted) .. 'ms-ago')
end
return out
"""

# Who the store is: its data set (an id made by the first sidecar to see it empty) and
# its process (Redis's run_id). Data that outlived a restart (RDB or AOF) may lack the
# rules committed after its last persisted write; `restarted` marks when a sidecar
# first saw the new process, and for the longest member ttl after it the store is
# settling: members re-publish the rules they hold.
# A new data set (none, or the one named in ARGV[4] the sidecar could not verify) starts
# its rule chain empty, at epoch 0: a rule of another data set never links to it.
# KEYS: dataset, store, epoch, head, anchor, rules. ARGV: the proposed identity, its
# genesis head and anchor, the identity to replace ('' for none).
STATE = """
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[4] then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[6], KEYS[3])
  redis.call('SET', KEYS[4], ARGV[2])
  redis.call('SET', KEYS[5], ARGV[3])
end
local dataset = redis.call('GET', KEYS[1])
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seen = redis.call('HGET', KEYS[2], 'run')
if seen ~= run then
  redis.call('HSET', KEYS[2], 'run', run)
  if seen then redis.call('HSET', KEYS[2], 'restarted', now) end
end
local settling = 0
local restarted = tonumber(redis.call('HGET', KEYS[2], 'restarted') or '0')
if restarted > 0 then
  local ttl = tonumber(redis.call('HGET', KEYS[2], 'max_ttl') or '0')
  settling = math.max(0, restarted + ttl - now)
end
-- The epoch as stored (validated by the sidecar: a counter it did not write is refused).
return {dataset, run, redis.call('GET', KEYS[3]) or '0', settling, now,
  redis.call('GET', KEYS[4]), redis.call('GET', KEYS[5])}
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

RENEW = """
-- Per hold i: KEYS[i] its holder key, ARGV[i] the lease id; ARGV[#KEYS + 1] the ttl in
-- ms. A hold its lease still has gets the ttl again; a lapsed one is not taken back.
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then
    redis.call('PEXPIRE', KEYS[i], ARGV[#KEYS + 1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""

LOCK = """
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
