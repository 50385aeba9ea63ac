-- domainconf.lua: set or clear per-domain limits (delay, concurrency) and
-- put the domains they affect back on the schedule under the new limits, so
-- a shorter delay or a higher concurrency takes effect at once.
--
-- KEYS[1..4] the per-domain queue: dq, domains, dstate, dconf (see domains.lua)
-- ARGV: pairs of field, value. Field "<source>:<domain>" as in dconf
--       ("o:example.com", "s:*", "r:example.com"); value "<delay ms>
--       <concurrency>" ("-" for unset) or "" to delete the field.
-- Returns the number of domains rescheduled.
--
-- uses: guard leases domains   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

dq_keys(1)
do
  local refused = guard({{D.dq, "zset"}, {D.domains, "zset"}, {D.state, "hash"}, {D.conf, "hash"}})
  if refused then return refused end
end
pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local now = redis_now_ms()
local all, touched = false, {}
for j = 1, #ARGV, 2 do
  local field, value = ARGV[j], ARGV[j + 1]
  if value == "" then
    redis.call("HDEL", D.conf, field)
  else
    redis.call("HSET", D.conf, field, value)
  end
  local domain = string.match(field, "^%a:(.*)$")
  if domain == "*" then all = true elseif domain then touched[#touched + 1] = domain end
end
local list = touched
if all then list = redis.call("ZRANGE", D.domains, 0, -1) end
for _, domain in ipairs(list) do
  redis.call("ZREM", D.domains, domain)
  dq_wake(domain, now)
end
return #list
