-- pop.lua: lease up to N requests to a node, in queue order, and return them.
--
-- KEYS[1] queue       zset  request id -> score
-- KEYS[2] requests    hash  request id -> payload
-- KEYS[3] leases      zset  request id -> lease deadline (ms, Redis clock)
-- KEYS[4] leased      hash  request id -> "node|score|deliveries"
-- KEYS[5] deliveries  hash  request id -> deliveries so far
-- KEYS[6] stats       hash  crawl-wide counters
-- ARGV[1] node id
-- ARGV[2] N, most requests to lease
-- ARGV[3] lease duration (ms)
-- ARGV[4] "min" (lowest score first) or "max" (highest score first)
-- Returns a flat list {id, payload, deliveries, id, payload, deliveries, ...}.

local queue, requests, leases, leased, deliveries, stats =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local node, n, lease_ms, order = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local t = redis.call("TIME")
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + lease_ms

local picked
if order == "max" then
  picked = redis.call("ZREVRANGE", queue, 0, n - 1, "WITHSCORES")
else
  picked = redis.call("ZRANGE", queue, 0, n - 1, "WITHSCORES")
end

local out = {}
local orphans, redelivered = 0, 0
for j = 1, #picked, 2 do
  local id, score = picked[j], picked[j + 1]
  redis.call("ZREM", queue, id)
  local payload = redis.call("HGET", requests, id)
  if payload then
    local d = (tonumber(redis.call("HGET", deliveries, id)) or 0) + 1
    if d > 1 then redelivered = redelivered + 1 end
    redis.call("ZADD", leases, deadline, id)
    redis.call("HSET", leased, id, node .. "|" .. score .. "|" .. d)
    out[#out + 1] = id
    out[#out + 1] = payload
    out[#out + 1] = d
  else
    -- an id without a payload (deleted by hand?): nothing to crawl
    redis.call("HDEL", deliveries, id)
    orphans = orphans + 1
  end
end
if #out > 0 then redis.call("HINCRBY", stats, "leased", #out / 3) end
if redelivered > 0 then redis.call("HINCRBY", stats, "redelivered", redelivered) end
if orphans > 0 then redis.call("HINCRBY", stats, "orphan_ids", orphans) end
return out
