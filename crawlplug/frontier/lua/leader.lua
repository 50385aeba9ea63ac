-- leader.lua: a control process (crawlplug control) becomes, stays or stops being
-- the leader of one crawl's scheduled runs: the one process that fires them
-- (crawlplug/crawl/leadership.py); over the alertleader and alertfence keys, of
-- one crawl's alert rules (crawlplug/alerts/store.py). Each new leadership is handed a fencing
-- token, one more than the last (INCR), which firing.lua checks on every write
-- of a firing: a leader that stalled past its lease and was replaced writes
-- nothing any more, even if it does not know yet.
--
-- KEYS[1] leader  str  "<owner> <fence>", with an expiry (the lease)
-- KEYS[2] fence   str  the last fencing token handed out (an integer)
-- ARGV[1] owner: the control process's id (host:pid:random)
-- ARGV[2] the lease (ms): a leader that does not renew within it is replaced
-- ARGV[3] "hold" (become or stay the leader) or "release" (step down, if leader)
-- Returns {fence, what, holder}: fence is this owner's token (0 if it does not
-- lead); what is "acquired", "renewed", "held" (by another: holder), "released"
-- or "none" (released while not leading).
--
-- uses: guard   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local leader, fence_key = KEYS[1], KEYS[2]
local owner, lease, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]

-- ---- all or nothing (guard.lua): every key checked before the first write ----
do
  local refused = guard({{leader, "string"}, {fence_key, "int"}})
  if refused then return refused end
end
if not lease or lease <= 0 then
  return redis.error_reply("leader.lua: the lease must be a positive number of ms")
end
-- ---- end of the checks ----

local held = redis.call("GET", leader)
local holder, token = nil, nil
if held then
  local sep = string.find(held, " ", 1, true)
  if sep then holder, token = string.sub(held, 1, sep - 1), string.sub(held, sep + 1) end
end

if mode == "release" then
  if holder == owner then
    redis.call("DEL", leader)
    return {tonumber(token) or 0, "released", owner}
  end
  return {0, "none", holder or ""}
end

if holder == owner then
  redis.call("PEXPIRE", leader, lease)
  return {tonumber(token) or 0, "renewed", owner}
end
if held then
  return {0, "held", holder or held}
end
local fence = redis.call("INCR", fence_key)
redis.call("SET", leader, owner .. " " .. fence, "PX", lease)
return {fence, "acquired", owner}
