-- starts.lua: lease up to N start entries to a node. An entry becomes a
-- lease like any request's (same ids, leases, leased, requests), marked
-- "start" in place of a queue score: the node acks it in the admission call
-- that stores the requests made from it; if the node dies first, reap.lua
-- puts the entry back at the head of start_urls, so no start URL is lost.
--
-- Entries are taken from the source keys in their order: all a key holds
-- before the next one is read, so a batch holds entries of a later key only
-- once every earlier key is empty (priority-ordered start keys,
-- CRAWLPLUG_START_KEYS; scrapy-redis's redis_key list).
--
-- KEYS[1] requests    hash  request id -> payload (here: the raw entry)
-- KEYS[2] seq         str   last request id
-- KEYS[3] leases      zset  request id -> lease deadline (ms)
-- KEYS[4] leased      hash  request id -> "node|start|deliveries"
-- KEYS[5] stats       hash  crawl-wide counters
-- KEYS[6 .. 5+O]      lists the crawl's own start-entry keys (start_urls and its
--                     lanes start_urls:<name>), in priority order; an entry of a lane
--                     is leased with the score "start:<name>" (leases.lua), so that a
--                     release or a reap puts it back there
-- KEYS[6+O .. last-1] scrapy-redis's start URL keys (each a list, set or sorted
--                     set, read as scrapy-redis does), in priority order
-- KEYS[last] epoch    str   the crawl's epoch (epoch.lua)
-- ARGV[1] node id
-- ARGV[2] N, most entries to take
-- ARGV[3] lease duration (ms)
-- ARGV[4] O, how many of the source keys are the crawl's own lists
-- ARGV[5] the caller's epoch (epoch.lua)
-- Returns {id, entry, id, entry, ...}.
--
-- uses: guard epoch leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local requests, seq, leases, leased, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local node, n, lease_ms, own = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local first, last = 6, #KEYS - 1 -- the source keys

do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write
-- ---- all or nothing (guard.lua): every key and counter checked before the first write ----
-- (scrapy-redis's keys are read by their type, whatever it is: scrapy-redis's own)
do
  local spec = {{requests, "hash"}, {seq, "int"}, {leases, "zset"}, {leased, "hash"}, {stats, "counters"}}
  for k = first, first + own - 1 do spec[#spec + 1] = {KEYS[k], "list"} end
  local refused = guard(spec)
  if refused then return refused end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (SPOP, TIME before writes)
local entries, lanes = {}, {}
for k = first, last do
  local want = n - #entries
  if want <= 0 then break end
  local key, more = KEYS[k], {}
  local kind = k < first + own and "list" or redis.call("TYPE", key)["ok"]
  if kind == "list" then
    more = redis.call("LRANGE", key, 0, want - 1)
    if #more > 0 then redis.call("LTRIM", key, #more, -1) end
  elseif kind == "set" then
    more = redis.call("SPOP", key, want)
  elseif kind == "zset" then
    more = redis.call("ZREVRANGE", key, 0, want - 1)
    if #more > 0 then redis.call("ZREMRANGEBYRANK", key, -#more, -1) end
  end
  local lane = k < first + own and string.match(key, ":start_urls:([^:]+)$") or nil
  for _, e in ipairs(more) do
    entries[#entries + 1] = e
    lanes[#entries] = lane
  end
end
if #entries == 0 then return {} end

local now = redis_now_ms()
local deadline, floor = now + lease_ms, now * 1000 -- ids from leases.lua's id_floor at least
local out = {}
for j, entry in ipairs(entries) do
  local id = next_id(seq, requests, floor)
  redis.call("HSET", requests, id, entry)
  redis.call("ZADD", leases, deadline, id)
  redis.call("HSET", leased, id, node .. "|" .. (lanes[j] and "start:" .. lanes[j] or "start") .. "|1")
  out[#out + 1] = id
  out[#out + 1] = entry
end
redis.call("HINCRBY", stats, "start_taken", #entries)
return out
