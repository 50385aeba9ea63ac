-- alert.lua: the leader of a crawl's alert rules (leader.lua over the alertleader
-- and alertfence keys) records a rule's new state, and the event of a change
-- (an alert fired or cleared), checked against its fencing token: a leader that
-- stalled past its lease and was replaced records nothing, so no episode is
-- announced twice (crawlplug/alerts/store.py, crawlplug/alerts/evaluator.py).
--
-- KEYS[1] alertleader  str   "<owner> <fence>" of the leading evaluator
-- KEYS[2] alerts       hash  rule id -> JSON rule
-- KEYS[3] alertstate   hash  rule id -> JSON state
-- KEYS[4] alertlog     list  the last events, newest first (JSON)
-- ARGV[1] owner (the evaluator's id)
-- ARGV[2] its fence (the token leader.lua gave it)
-- ARGV[3] the rule's id
-- ARGV[4] JSON of the rule's new state
-- ARGV[5] JSON of the event to log ("" for none)
-- ARGV[6] how many events the log keeps
-- Returns {what[, detail]}:
--   "done"     the state recorded (and the event pushed on the log)
--   "deposed"  this owner does not hold this fence any more: nothing written (detail: the holder)
--   "gone"     no such rule (deleted meanwhile): nothing written
--
-- uses: guard   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local leader, alerts, state, log = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, fence, id, new, event, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])

-- ---- all or nothing (guard.lua): every key checked before the first write ----
do
  local refused = guard({{leader, "string"}, {alerts, "hash"}, {state, "hash"}, {log, "list"}})
  if refused then return refused end
end
if not keep or keep < 1 then
  return redis.error_reply("alert.lua: the log must keep at least one event")
end
if redis.call("GET", leader) ~= owner .. " " .. fence then
  return {"deposed", redis.call("GET", leader) or ""}
end
if redis.call("HEXISTS", alerts, id) == 0 then
  return {"gone"}
end
-- ---- end of the checks ----

redis.call("HSET", state, id, new)
if event ~= "" then
  redis.call("LPUSH", log, event)
  redis.call("LTRIM", log, 0, keep - 1)
end
return {"done"}
