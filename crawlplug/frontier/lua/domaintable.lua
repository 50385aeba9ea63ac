-- domaintable.lua: the per-domain schedule as the operators see it (read only):
-- the domains due soonest, each with its queue size, requests in flight, leases so
-- far and the limits in force, computed by domains.lua's own rule (dq_limits).
--
-- KEYS[1..4] the per-domain queue: dq, domains, dstate, dconf (see domains.lua)
-- ARGV[1]    how many domains, soonest first (parked ones, at +inf, last)
-- Returns {now ms, then per domain: domain, next start (ms, or "inf"), queued,
-- in flight, leased so far, delay ms, concurrency}.
--
-- uses: guard leases domains   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

dq_keys(1)
do
  local refused = guard({{D.dq, "zset"}, {D.domains, "zset"}, {D.state, "hash"}, {D.conf, "hash"}})
  if refused then return refused end
end
local n = tonumber(ARGV[1]) or 20
local out = {redis_now_ms()}
local rows = redis.call("ZRANGE", D.domains, 0, n - 1, "WITHSCORES")
for i = 1, #rows, 2 do
  local domain = rows[i]
  local state = redis.call("HMGET", D.state, "b:" .. domain, "n:" .. domain)
  local delay, conc = dq_limits(domain)
  out[#out + 1] = domain
  out[#out + 1] = rows[i + 1]
  out[#out + 1] = redis.call("ZLEXCOUNT", D.dq, "[" .. domain .. "\t", "[" .. domain .. "\t\255")
  out[#out + 1] = tonumber(state[1]) or 0
  out[#out + 1] = tonumber(state[2]) or 0
  out[#out + 1] = tostring(delay)
  out[#out + 1] = conc
end
return out
