-- runstart.lua: the node that began a run (join.lua answered "begin") has
-- cleared what the last run left behind: the run is now running, and the
-- node joins it.
--
-- KEYS[1] run        hash  the current run (see join.lua)
-- KEYS[2] nodes      zset  node id -> heartbeat deadline (ms)
-- KEYS[3] producers  zset  node id -> deadline, nodes still reading start requests
-- ARGV[1] node id
-- ARGV[2] the epoch join.lua gave
-- ARGV[3] node time-to-live (ms)
-- Returns {"running", run id} or, when another node took the beginning over
-- (this one stalled past its deadline) or the crawl was reset meanwhile,
-- {"lost", state}: join again.
--
-- uses: guard leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local run_key, nodes, producers = KEYS[1], KEYS[2], KEYS[3]
local node, epoch, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

do
  local refused = guard({{run_key, "hash"}, {nodes, "zset"}, {producers, "zset"}})
  if refused then return refused end
end
pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local state = redis.call("HMGET", run_key, "state", "epoch", "starter", "id")
if state[1] ~= "starting" or state[2] ~= epoch or state[3] ~= node then
  return {"lost", state[1] or ""}
end
local now = redis_now_ms()
redis.call("HSET", run_key, "state", "running", "started", now)
redis.call("HDEL", run_key, "starter", "deadline")
redis.call("ZADD", nodes, now + ttl, node)
redis.call("ZADD", producers, now + ttl, node)
return {"running", tonumber(state[4])}
