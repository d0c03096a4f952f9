"""The warm tier's Lua scripts on one Redis: a lookup's read and its single-flight hold
in one atomic step, and a store's write and its release in another.

Why scripts: a MISS used to cost three sequential round trips (MGET, SET NX of the
holder key, MGET again in case a result landed between the two) and a store two (SET,
then the compare-and-delete of the holder). Run as one script, the read and the hold
see one instant of the data, so the re-check has nothing left to catch: a holder
writes its result before it releases, so a result not there when the script runs
cannot land until our hold ends. Both need every key on one server: a cluster keeps
the separate calls (entry and holder keys live in different slots).

One thing differs from the separate calls: Redis's CLIENT PAUSE WRITE (a FAILOVER)
holds every script, so warm reads wait for the pause's end (and turn into degraded
MISSes if it outlasts the lookup deadline) where a plain MGET would have answered. Hot
hits are unaffected, and nothing is answered wrongly.
"""

from __future__ import annotations

GET_OR_HOLD = """
-- KEYS[1] the epoch; then per lookup its entry and holder keys.
-- ARGV per lookup: its lease id and the hold's ttl in ms.
-- Reply: the epoch, then per lookup its value (nil if absent) and 1 if the hold was
-- taken here (only tried where the value is absent), else 0. The hold is a pcall: a
-- write refused (maxmemory reached, a read-only replica) is a hold not taken, and the
-- reads still answer, as the separate SET NX after an MGET did.
local out = {redis.call('GET', KEYS[1])}
for i = 2, #KEYS, 2 do
  local value = redis.call('GET', KEYS[i])
  out[#out + 1] = value
  local held = 0
  if not value then
    local ok = redis.pcall('SET', KEYS[i + 1], ARGV[i - 1], 'NX', 'PX', ARGV[i])
    if type(ok) == 'table' and ok.ok then held = 1 end
  end
  out[#out + 1] = held
end
return out
"""

PUT_AND_RELEASE = """
-- Per store i: KEYS[2i-1] its entry, KEYS[2i] its holder; ARGV[3i-2] the value,
-- ARGV[3i-1] the ttl in ms, ARGV[3i] the lease id. Each entry is written, then its
-- holder deleted if that lease still holds it.
for i = 1, #KEYS / 2 do
  redis.call('SET', KEYS[2 * i - 1], ARGV[3 * i - 2], 'PX', ARGV[3 * i - 1])
  if redis.call('GET', KEYS[2 * i]) == ARGV[3 * i] then redis.call('DEL', KEYS[2 * i]) end
end
return 1
"""
