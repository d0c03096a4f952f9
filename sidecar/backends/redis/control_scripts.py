"""The control store's Lua scripts: each touches only `{meta}`-tagged keys, so it runs
atomically on one Redis (and on one slot of a cluster). Their time is Redis's own clock."""

COMMIT = """
local e = redis.call('INCR', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], e, e .. '|' .. now .. '|' .. ARGV[1])
local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*',
  'epoch', e, 'time_ms', now, 'caller', ARGV[3], 'selector', ARGV[1],
  'reason', ARGV[2], 'estimated_entries', ARGV[4])
-- PUBLISH on one Redis, SPUBLISH (a shard channel in this slot) on a cluster.
redis.call(ARGV[7], ARGV[5], e)
return {e, now, id}
"""

HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(dead) do redis.call('HDEL', KEYS[2], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
local acked = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) > acked then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
-- A Redis that lost its data restarts the counter; entries and sidecars still hold
-- epochs of the old numbering, so new rules must be numbered above them.
if tonumber(ARGV[2]) > tonumber(redis.call('GET', KEYS[3]) or '0') then
  redis.call('SET', KEYS[3], ARGV[2])
end
redis.call('HSETNX', KEYS[4], 'born', now)
if tonumber(ARGV[3]) > tonumber(redis.call('HGET', KEYS[4], 'max_ttl') or '0') then
  redis.call('HSET', KEYS[4], 'max_ttl', ARGV[3])
end
if tonumber(ARGV[4]) > tonumber(redis.call('HGET', KEYS[4], 'retention') or '0') then
  redis.call('HSET', KEYS[4], 'retention', ARGV[4])
end
return now
"""

# Pruning on the store's clock with the fleet's retention: a sidecar whose clock runs
# ahead, or whose TTL settings are shorter, cannot delete rules others still need.
PRUNE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fleet = tonumber(redis.call('HGET', KEYS[2], 'retention') or '0')
local keep = math.max(tonumber(ARGV[1]), fleet)
local cutoff = now - keep
local old = {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local at = tonumber(string.match(m, '^%d+|(%d+)|'))
  if at ~= nil and at < cutoff then table.insert(old, m) end
end
for i = 1, #old, 500 do
  redis.call('ZREM', KEYS[1], unpack(old, i, math.min(i + 499, #old)))
end
return {cutoff, #old}
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
STATE = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
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
return {dataset, run, redis.call('GET', KEYS[3]) or '0', settling, now}
"""

REPUBLISH = """
local added = 0
local newest = tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  added = added + redis.call('ZADD', KEYS[1], 'NX', ARGV[i], ARGV[i + 1])
  newest = math.max(newest, tonumber(ARGV[i]))
end
if newest > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], newest)
end
return added
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

LOCK = """
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
