-- admit.lua: admit a batch of requests and acknowledge finished leases, in one
-- atomic step. A request's fingerprint is recorded only together with the
-- request itself (never one without the other), and a parent lease is acked
-- in the same call that stores the requests its callback produced.
--
-- KEYS[1] seen        set   raw request fingerprints
-- KEYS[2] queue       zset  request id -> score
-- KEYS[3] requests    hash  request id -> payload
-- KEYS[4] seq         str   last request id
-- KEYS[5] leases      zset  request id -> lease deadline (ms)
-- KEYS[6] leased      hash  request id -> "node|score|deliveries"
-- KEYS[7] deliveries  hash  request id -> deliveries so far
-- KEYS[8] stats       hash  crawl-wide counters
-- ARGV[1] dedup mode: "set" (exact) or "none" (every request admitted)
-- ARGV[2] node id of the caller
-- ARGV[3] A = number of lease ids to acknowledge, then ARGV[4 .. 3+A] the ids
-- then, per request, three arguments: fingerprint ("" = dont_filter), score, payload
-- Returns {flags, acked, stale}: flags has one char per request, "1" admitted,
-- "0" filtered as a duplicate; stale counts acks of leases this node no longer
-- held (reaped while it stalled, or already acked).

local seen, queue, requests, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local leases, leased, deliveries, stats = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local mode, node = ARGV[1], ARGV[2]
local nacks = tonumber(ARGV[3])
local owner_prefix = node .. "|"

local flags = {}
local admitted, filtered = 0, 0
local i = 4 + nacks
while i + 2 <= #ARGV do
  local fp, score, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local new = 1
  if fp ~= "" and mode == "set" then
    new = redis.call("SADD", seen, fp)
  end
  if new == 1 then
    local id = string.format("%016d", redis.call("INCR", seq))
    redis.call("HSET", requests, id, payload)
    redis.call("ZADD", queue, score, id)
    admitted = admitted + 1
    flags[#flags + 1] = "1"
  else
    filtered = filtered + 1
    flags[#flags + 1] = "0"
  end
  i = i + 3
end

local acked, stale = 0, 0
for a = 4, 3 + nacks do
  local id = ARGV[a]
  local info = redis.call("HGET", leased, id)
  if info and string.sub(info, 1, #owner_prefix) == owner_prefix then
    redis.call("ZREM", leases, id)
    redis.call("HDEL", leased, id)
    redis.call("HDEL", requests, id)
    redis.call("HDEL", deliveries, id)
    acked = acked + 1
  elseif not info and redis.call("ZREM", queue, id) == 1 then
    -- reaped back into the queue while we stalled, not yet taken by anyone:
    -- the work is done now, so finish it instead of doing it twice
    redis.call("HDEL", requests, id)
    redis.call("HDEL", deliveries, id)
    acked = acked + 1
  else
    stale = stale + 1
  end
end

if admitted > 0 then redis.call("HINCRBY", stats, "enqueued", admitted) end
if filtered > 0 then redis.call("HINCRBY", stats, "filtered", filtered) end
if acked > 0 then redis.call("HINCRBY", stats, "acked", acked) end
if stale > 0 then redis.call("HINCRBY", stats, "stale_acks", stale) end
return {table.concat(flags), acked, stale}
