-- renew.lua: renew a node's leases in one shard of a sharded crawl (the
-- node's heartbeat itself goes to the crawl's own keys: heartbeat.lua).
--
-- KEYS[1] leases  zset  request id -> lease deadline (ms)
-- KEYS[2] leased  hash  request id -> "node|score|deliveries[|domain]"
-- KEYS[3] reply   str   the node's call record in this shard (record.lua): checked, kept alive
-- KEYS[4] epoch   str   the part's epoch (epoch.lua)
-- ARGV[1] node id
-- ARGV[2] lease duration (ms)
-- ARGV[3] "<caller> <c>": the node's last recorded admission in this shard (record.lua;
--         "" checks nothing): a record older than it refuses the call with "ROLLBACK ..."
-- then the ids of the leases this node believes it holds in this shard,
-- and last the caller's epoch (epoch.lua)
-- Returns the ids it no longer holds (reaped after it stalled).
-- Goes through on a full Redis, as heartbeat.lua does (see there).
--
-- uses: guard epoch record leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local leases, leased = KEYS[1], KEYS[2]
local node, lease_ms = ARGV[1], tonumber(ARGV[2])

do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write
do -- record.lua: this shard went back in time past this node's last recorded admission?
  local caller, confirmed = record_check_arg(ARGV[3])
  local refused = confirmed > 0 and rollback_guard(caller, confirmed, (call_record(KEYS[3])))
  if refused then return refused end
end
-- ---- all or nothing (guard.lua): every key checked before the first write ----
-- the records of the leases named: read first, the check of leased when there are any
local infos
do
  local refused
  infos, refused = renew_read(leased, 4, NARGV)
  if refused then return refused end
  refused = guard({{leases, "zset"}, {leased, "hash"}})
  if refused then return refused end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local now = redis_now_ms()

first_write_allowed_when_full(leased)
record_renew(KEYS[3])
return renew_leases(leases, infos, node, now, lease_ms, 4, NARGV, {})
