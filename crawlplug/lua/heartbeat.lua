-- heartbeat.lua: mark a node alive, publish its metrics, renew its leases.
--
-- KEYS[1] nodes       zset  node id -> heartbeat deadline (ms)
-- KEYS[2] leases      zset  request id -> lease deadline (ms)
-- KEYS[3] leased      hash  request id -> "node|score|deliveries"
-- KEYS[4] node        hash  this node's metrics
-- KEYS[5] producers   zset  node id -> deadline, nodes still reading start requests
-- KEYS[6] control     hash  crawl-wide switches set by operators ("paused"), and
--                           "lost": set when Redis lost the crawl's data (below)
-- KEYS[7] meta        hash  the crawl's fixed layout, written when a node joins
-- ARGV[1] node id
-- ARGV[2] lease duration (ms)
-- ARGV[3] node time-to-live (ms) without a heartbeat
-- ARGV[4] "1" if this node is still producing start requests, else "0"
-- ARGV[5] "1" if this node joined the crawl through its meta (the scheduler):
--         meta missing then means Redis lost the crawl's data (restarted
--         without persistence, flushed, failed over to an empty replica)
-- ARGV[6] M = number of metric field/value pairs, then 2*M arguments
-- then the ids of the leases this node believes it holds
-- Returns {now_ms, paused, lost data, lost ids...}: paused is 1 while an
-- operator has paused the crawl; lost data is 1 when this call found the
-- crawl's data gone (control "lost" is then set for every node to see); the
-- ids are those this node no longer holds (reaped after it stalled past the
-- lease timeout); it must not ack or release them.
--
-- Lease renewal must go through on a full Redis (maxmemory reached): else an
-- OOM longer than the lease timeout gets every page in flight reaped and
-- fetched again. Redis 7 runs it with flags=allow-oom (lua/__init__.py);
-- older servers let it through because its first write frees memory
-- (first_write_allowed_when_full, guard.lua).

local nodes, leases, leased, nodekey, producers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local node, lease_ms, ttl_ms, producing = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local joined, m = ARGV[5], tonumber(ARGV[6])

-- ---- all or nothing (guard.lua): every key checked before the first write ----
do
  local refused = guard({{nodes, "zset"}, {leases, "zset"}, {leased, "hash"}, {nodekey, "hash"},
                         {producers, "zset"}, {KEYS[6], "hash"}, {KEYS[7], "hash"}})
  if refused then return refused end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

first_write_allowed_when_full(nodekey)
local lost_data = 0
if joined == "1" and redis.call("EXISTS", KEYS[7]) == 0 then
  lost_data = 1
  redis.call("HSETNX", KEYS[6], "lost", cjson.encode({node = node, at = now}))
end
redis.call("ZADD", nodes, now + ttl_ms, node)
if producing == "1" then
  redis.call("ZADD", producers, now + ttl_ms, node)
else
  redis.call("ZREM", producers, node)
end
redis.call("HSET", nodekey, "last_seen", now)
for j = 7, 6 + 2 * m, 2 do
  redis.call("HSET", nodekey, ARGV[j], ARGV[j + 1])
end
redis.call("PEXPIRE", nodekey, ttl_ms * 10)

local out = {now, redis.call("HEXISTS", KEYS[6], "paused"), lost_data}
local prefix = node .. "|"
for j = 7 + 2 * m, #ARGV do
  local id = ARGV[j]
  local info = redis.call("HGET", leased, id)
  if info and string.sub(info, 1, #prefix) == prefix then
    redis.call("ZADD", leases, "XX", now + lease_ms, id)
  else
    out[#out + 1] = id
  end
end
return out
