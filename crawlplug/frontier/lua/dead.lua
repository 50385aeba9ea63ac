-- dead.lua: move a leased request that cannot be crawled (undecodable
-- payload, unknown callback, ...) to the dead letters, atomically.
--
-- KEYS[1] leases      zset  request id -> lease deadline
-- KEYS[2] leased      hash  request id -> "node|score|deliveries"
-- KEYS[3] requests    hash  request id -> payload
-- KEYS[4] deliveries  hash  request id -> deliveries so far
-- KEYS[5] dead        list  dead letters: JSON header, "\n", payload
-- KEYS[6] stats       hash  crawl-wide counters
-- KEYS[7..10]         the per-domain queue: dq, domains, dstate, dconf
-- KEYS[11] epoch      str   the part's epoch (epoch.lua)
-- ARGV[1] node id
-- ARGV[2] request id
-- ARGV[3] JSON header (id, reason, node, ...), one line
-- ARGV[4] the caller's epoch (epoch.lua)
-- Returns 1 if the request was moved, 0 if this node no longer held it.
--
-- uses: guard epoch leases domains   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local leases, leased, requests, deliveries, dead, stats =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local node, id, header = ARGV[1], ARGV[2], ARGV[3]
dq_keys(7)
do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write

-- ---- all or nothing (guard.lua): every key and counter checked before the first write ----
do
  local refused = guard({{leases, "zset"}, {leased, "hash"}, {requests, "hash"}, {deliveries, "hash"},
                         {dead, "list"}, {stats, "counters"}, {D.dq, "zset"}, {D.domains, "zset"},
                         {D.state, "hash"}, {D.conf, "hash"}})
  if refused then return refused end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local info = redis.call("HGET", leased, id)
if not info or string.sub(info, 1, #node + 1) ~= node .. "|" then
  return 0
end
local payload = redis.call("HGET", requests, id) or ""
redis.call("RPUSH", dead, header .. "\n" .. payload)
redis.call("ZREM", leases, id)
redis.call("HDEL", leased, id)
redis.call("HDEL", requests, id)
redis.call("HDEL", deliveries, id)
redis.call("HINCRBY", stats, "dead", 1)
local _, _, _, domain, freed = lease_info(info)
if domain ~= "" then
  dq_end(domain, id, freed, redis_now_ms())
end
return 1
