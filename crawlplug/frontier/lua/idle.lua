-- idle.lua: is the whole crawl out of work? Read-only.
--
-- KEYS[1] queue      zset  request id -> score
-- KEYS[2] leases     zset  request id -> lease deadline
-- KEYS[3] producers  zset  node id -> deadline, nodes still reading start requests
-- KEYS[4] dq         zset  the per-domain queue (see domains.lua)
-- KEYS[5] start_urls list  start entries not yet taken by a node
-- KEYS[6] control    hash  crawl-wide switches ("lost": Redis lost the crawl's data)
-- KEYS[7..] lists           the crawl's lanes start_urls:<lane> the caller reads: their
--                           entries are start entries too
-- Returns {queued (requests and start entries), leased, live producers, start
-- entries, lost, start_urls type}: lost is 1 once a node found the crawl's data
-- gone (heartbeat.lua); start_urls type is "" for a list (or no key), else the
-- type it holds: its entries are then not counted (starts.lua refuses to read
-- them), so a corrupt start_urls never keeps the crawl from finishing.
--
-- uses: guard leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

do
  local refused = guard({{KEYS[1], "zset"}, {KEYS[2], "zset"}, {KEYS[3], "zset"}, {KEYS[4], "zset"},
                         {KEYS[6], "hash"}})
  if refused then return refused end
end

local now = redis_now_ms()
local kind = redis.call("TYPE", KEYS[5])["ok"]
local starts = lane_entries(7, #KEYS)
if kind == "list" then starts = starts + redis.call("LLEN", KEYS[5]) end
if kind == "list" or kind == "none" then kind = "" end
return {
  redis.call("ZCARD", KEYS[1]) + redis.call("ZCARD", KEYS[4]) + starts,
  redis.call("ZCARD", KEYS[2]),
  live_count(KEYS[3], now),
  starts,
  redis.call("HEXISTS", KEYS[6], "lost"),
  kind,
}
