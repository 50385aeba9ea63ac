-- heartbeat.lua: mark a node alive, publish its metrics, renew its leases.
--
-- KEYS[1] nodes       zset  node id -> heartbeat deadline (ms)
-- KEYS[2] leases      zset  request id -> lease deadline (ms)
-- KEYS[3] leased      hash  request id -> "node|score|deliveries"
-- KEYS[4] node        hash  this node's metrics (kept an hour after its last heartbeat)
-- KEYS[5] producers   zset  node id -> deadline, nodes still reading start requests
-- KEYS[6] control     hash  crawl-wide switches set by operators ("paused")
-- ARGV[1] node id
-- ARGV[2] lease duration (ms)
-- ARGV[3] node time-to-live (ms) without a heartbeat
-- ARGV[4] "1" if this node is still producing start requests, else "0"
-- ARGV[5] M = number of metric field/value pairs, then 2*M arguments
-- then the ids of the leases this node believes it holds
-- Returns {now_ms, paused, lost ids...}: paused is 1 while an operator has
-- paused the crawl; the ids are those this node no longer holds (reaped
-- after it stalled past the lease timeout); it must not ack or release them.

local nodes, leases, leased, nodekey, producers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local node, lease_ms, ttl_ms, producing = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local m = tonumber(ARGV[5])

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call("ZADD", nodes, now + ttl_ms, node)
if producing == "1" then
  redis.call("ZADD", producers, now + ttl_ms, node)
else
  redis.call("ZREM", producers, node)
end
redis.call("HSET", nodekey, "last_seen", now)
for j = 6, 5 + 2 * m, 2 do
  redis.call("HSET", nodekey, ARGV[j], ARGV[j + 1])
end
-- kept an hour past its last heartbeat: a node that dies is shown with its last numbers
-- for the hour reap.lua keeps it in the graveyard
redis.call("PEXPIRE", nodekey, math.max(ttl_ms * 10, ttl_ms + 3600000))

local out = {now, redis.call("HEXISTS", KEYS[6], "paused")}
local prefix = node .. "|"
for j = 6 + 2 * m, #ARGV do
  local id = ARGV[j]
  local info = redis.call("HGET", leased, id)
  if info and string.sub(info, 1, #prefix) == prefix then
    redis.call("ZADD", leases, "XX", now + lease_ms, id)
  else
    out[#out + 1] = id
  end
end
return out
