-- admit.lua: admit a batch of requests and acknowledge finished leases, in one
-- atomic step. A request's fingerprint is recorded only together with the
-- request itself (never one without the other), and a parent lease is acked
-- in the same call that stores the requests its callback produced.
--
-- KEYS[1] seen        the dedup state: set (mode "set"), zset fingerprint ->
--                     expiry ms (mode "ttl"), or the Bloom filter's hash of
--                     layer counts (mode "bloom")
-- KEYS[2] queue       zset  request id -> score
-- KEYS[3] requests    hash  request id -> payload
-- KEYS[4] seq         str   last request id
-- KEYS[5] leases      zset  request id -> lease deadline (ms)
-- KEYS[6] leased      hash  request id -> "node|score|deliveries"
-- KEYS[7] deliveries  hash  request id -> deliveries so far
-- KEYS[8] stats       hash  crawl-wide counters
-- KEYS[9..]           mode "bloom" only: the bit strings of every layer the
--                     caller knows plus one spare layer, chunk by chunk
-- ARGV[1] dedup mode: "set", "ttl", "bloom" or "none" (every request admitted)
-- ARGV[2] node id of the caller
-- ARGV[3] mode parameter: "ttl": default time-to-live (ms); "bloom":
--         "<chunk bits>;<m>,<k>,<capacity>,<chunks>;..." for the known layers
--         and the spare; otherwise ignored
-- ARGV[4] A = number of lease ids to acknowledge, then ARGV[5 .. 4+A] the ids
-- then, per request, three arguments: dedup key ("" = dont_filter), score,
-- payload (an empty payload only records the fingerprint: a dupefilter used
-- on its own). The dedup key is the raw fingerprint ("set"), "<ttl ms>:<raw
-- fingerprint>" ("ttl", ttl "" = default) or "<h1>,<h2>" ("bloom").
-- Returns {flags, acked, stale, layers}: flags has one char per request, "1"
-- admitted, "0" filtered as a duplicate; stale counts acks of leases this
-- node no longer held; layers is the Bloom filter's layer count (0 otherwise).
-- Mode "bloom" returns {"STALE", layers} and changes nothing when another node
-- grew the filter beyond the layers the caller passed: call again. It returns
-- {"PARTIAL", flags, layers} when the filter needed a second new layer within
-- this batch: the requests that flags covers are done, no ack was made; call
-- again with the rest of the batch (and the acks) and the new layer's keys.

local seen, queue, requests, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local leases, leased, deliveries, stats = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local mode, node, param = ARGV[1], ARGV[2], ARGV[3]
local nacks = tonumber(ARGV[4])

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)

-- -- Bloom filter -------------------------------------------------------------
local chunk_bits, layers, nlayers = 0, {}, 0
local function bloom_setup()
  local parts = {}
  for part in string.gmatch(param, "[^;]+") do parts[#parts + 1] = part end
  chunk_bits = tonumber(parts[1])
  local key = 9
  for i = 2, #parts do
    local m, k, cap, chunks = string.match(parts[i], "^(%d+),(%d+),(%d+),(%d+)$")
    local layer = {m = tonumber(m), k = tonumber(k), cap = tonumber(cap), keys = {}}
    for c = 1, tonumber(chunks) do
      layer.keys[c] = KEYS[key]
      key = key + 1
    end
    layers[#layers + 1] = layer
  end
  nlayers = tonumber(redis.call("HGET", seen, "layers") or "0")
  if nlayers > #layers - 1 then
    return false -- another node chained layers we were not told about
  end
  return true
end

local function bloom_create(index)
  local layer = layers[index]
  local bits = layer.m * layer.k
  for c, key in ipairs(layer.keys) do
    local n = math.min(chunk_bits, bits - (c - 1) * chunk_bits)
    -- one exact allocation now, instead of strings growing (and over-allocating) bit by bit
    redis.call("SETRANGE", key, math.ceil(n / 8) - 1, "\0")
  end
  nlayers = index
  redis.call("HSET", seen, "layers", index)
end

local function bloom_bits(layer, h1, h2, fn)
  local m = layer.m
  local x, step = h1 % m, h2 % m
  if step == 0 then step = 1 end
  for j = 0, layer.k - 1 do
    local pos = j * m + x
    local chunk = math.floor(pos / chunk_bits)
    if not fn(layer.keys[chunk + 1], pos - chunk * chunk_bits) then return false end
    x = (x + step) % m
  end
  return true
end

local function getbit(key, offset) return redis.call("GETBIT", key, offset) == 1 end
local function setbit(key, offset) redis.call("SETBIT", key, offset, 1) return true end

local current_count = 0
-- Make sure the current layer has room; false if it is full and the caller
-- passed no spare layer to chain (the batch is then cut here: see PARTIAL).
local function bloom_room()
  if nlayers == 0 then
    bloom_create(1)
    current_count = 0
  end
  if current_count >= layers[nlayers].cap then
    if nlayers >= #layers then return false end
    bloom_create(nlayers + 1)
    current_count = 0
  end
  return true
end

local function bloom_add(dkey)
  local a, b = string.match(dkey, "^(%d+),(%d+)$")
  local h1, h2 = tonumber(a), tonumber(b)
  for i = nlayers, 1, -1 do -- newest first: recent URLs are the likely duplicates
    if bloom_bits(layers[i], h1, h2, getbit) then return 0 end
  end
  bloom_bits(layers[nlayers], h1, h2, setbit)
  current_count = redis.call("HINCRBY", seen, "count:" .. nlayers, 1)
  return 1
end

-- -- time-limited dedup --------------------------------------------------------
local now = 0
local default_ttl = 0
local function ttl_add(dkey)
  local sep = string.find(dkey, ":", 1, true)
  local ttl = tonumber(string.sub(dkey, 1, sep - 1)) or default_ttl
  local fp = string.sub(dkey, sep + 1)
  local expiry = tonumber(redis.call("ZSCORE", seen, fp) or "0")
  if expiry > now then return 0 end
  redis.call("ZADD", seen, now + ttl, fp)
  return 1
end

if mode == "bloom" then
  if not bloom_setup() then return {"STALE", nlayers} end
  current_count = tonumber(redis.call("HGET", seen, "count:" .. nlayers) or "0")
elseif mode == "ttl" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  default_ttl = tonumber(param)
  -- forget what expired; each fingerprint is removed once, so this is amortised O(log n)
  redis.call("ZREMRANGEBYSCORE", seen, "-inf", now)
end

local flags = {}
local admitted, filtered = 0, 0
local i = 5 + nacks
local partial = false
while i + 2 <= #ARGV do
  local dkey, score, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if mode == "bloom" and dkey ~= "" and not bloom_room() then
    partial = true -- the filter needs a layer whose keys we were not given
    break
  end
  local new = 1
  if dkey ~= "" then
    if mode == "set" then
      new = redis.call("SADD", seen, dkey)
    elseif mode == "bloom" then
      new = bloom_add(dkey)
    elseif mode == "ttl" then
      new = ttl_add(dkey)
    end
  end
  if new == 1 and payload == "" then
    flags[#flags + 1] = "1"
  elseif new == 1 then
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
local owner_prefix = node .. "|"
if partial then nacks = 0 end -- parents are acked only once all their children are stored
for a = 5, 4 + nacks do
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
if partial then
  return {"PARTIAL", table.concat(flags), nlayers}
end
return {table.concat(flags), acked, stale, nlayers}
