-- idle.lua: is the whole crawl out of work? Read-only.
--
-- KEYS[1] queue      zset  request id -> score
-- KEYS[2] leases     zset  request id -> lease deadline
-- KEYS[3] producers  zset  node id -> deadline, nodes still reading start requests
-- KEYS[4] dq         zset  the per-domain queue (see domains.lua)
-- KEYS[5] start_urls list  start entries not yet taken by a node
-- Returns {queued (requests and start entries), leased, live producers, start entries}.

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {
  redis.call("ZCARD", KEYS[1]) + redis.call("ZCARD", KEYS[4]) + redis.call("LLEN", KEYS[5]),
  redis.call("ZCARD", KEYS[2]),
  redis.call("ZCOUNT", KEYS[3], "(" .. now, "+inf"),
  redis.call("LLEN", KEYS[5]),
}
