-- starts.lua: lease up to N start entries to a node. An entry becomes a
-- lease like any request's (same ids, leases, leased, requests), marked
-- "start" in place of a queue score: the node acks it in the admission call
-- that stores the requests made from it; if the node dies first, reap.lua
-- puts the entry back at the head of start_urls, so no start URL is lost.
--
-- KEYS[1] start_urls  list  entries pushed by operators and the seed timer
-- KEYS[2] legacy      scrapy-redis's "<spider>:start_urls" (a list, set or
--                     sorted set, read as scrapy-redis does), or KEYS[1] again
-- KEYS[3] requests    hash  request id -> payload (here: the raw entry)
-- KEYS[4] seq         str   last request id
-- KEYS[5] leases      zset  request id -> lease deadline (ms)
-- KEYS[6] leased      hash  request id -> "node|start|deliveries"
-- KEYS[7] stats       hash  crawl-wide counters
-- KEYS[8] epoch       str   the crawl's epoch (epoch.lua)
-- ARGV[1] node id
-- ARGV[2] N, most entries to take
-- ARGV[3] lease duration (ms)
-- ARGV[4] the caller's epoch (epoch.lua)
-- Returns {id, entry, id, entry, ...}.
--
-- uses: guard epoch leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local starts, legacy, requests, seq, leases, leased, stats =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local node, n, lease_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write
-- ---- all or nothing (guard.lua): every key and counter checked before the first write ----
-- (the legacy key is read by its type, whatever it is: scrapy-redis's own)
do
  local refused = guard({{starts, "list"}, {requests, "hash"}, {seq, "int"}, {leases, "zset"},
                         {leased, "hash"}, {stats, "counters"}})
  if refused then return refused end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (SPOP, TIME before writes)
local entries = redis.call("LRANGE", starts, 0, n - 1)
if #entries > 0 then redis.call("LTRIM", starts, #entries, -1) end
if #entries < n and legacy ~= starts then
  local want = n - #entries
  local kind = redis.call("TYPE", legacy)["ok"]
  local more = {}
  if kind == "list" then
    more = redis.call("LRANGE", legacy, 0, want - 1)
    if #more > 0 then redis.call("LTRIM", legacy, #more, -1) end
  elseif kind == "set" then
    more = redis.call("SPOP", legacy, want)
  elseif kind == "zset" then
    more = redis.call("ZREVRANGE", legacy, 0, want - 1)
    if #more > 0 then redis.call("ZREMRANGEBYRANK", legacy, -#more, -1) end
  end
  for _, e in ipairs(more) do entries[#entries + 1] = e end
end
if #entries == 0 then return {} end

local deadline = redis_now_ms() + lease_ms
local out = {}
for _, entry in ipairs(entries) do
  local id = next_id(seq, requests)
  redis.call("HSET", requests, id, entry)
  redis.call("ZADD", leases, deadline, id)
  redis.call("HSET", leased, id, node .. "|start|1")
  out[#out + 1] = id
  out[#out + 1] = entry
end
redis.call("HINCRBY", stats, "start_taken", #entries)
return out
