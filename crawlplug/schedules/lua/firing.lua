-- firing.lua: one firing of a scheduled run, claimed and then closed by the
-- leader of the crawl's schedules (leader.lua), checked against its fencing
-- token at each step (crawlplug/schedules/store.py).
--
-- KEYS[1] leader     str   "<owner> <fence>" of the leading control process
-- KEYS[2] schedules  hash  schedule name -> JSON spec: ..., "next" (ms), "last" (the last firing)
-- KEYS[3] fires      list  the crawl's last firings, newest first (JSON)
-- ARGV[1] owner (the control process's id)
-- ARGV[2] its fence (the token leader.lua gave it)
-- ARGV[3] the schedule's name
-- ARGV[4] "claim", "adopt" or "done"
-- ARGV[5] the due time being fired (ms)
-- ARGV[6] claim: the next due time (ms), the first one after now (missed times
--         are fired once, not once each); done: JSON of the outcome (state, ...)
-- ARGV[7] claim: how many due times this firing stands for (1, or more when some were missed)
-- Returns {what[, detail]}:
--   "claimed"  the firing is this leader's: schedules[name].last = {due, state "firing", fence, ...}
--   "adopted"  a firing left "firing" by an earlier leader (a lower fence) is this one's now
--   "done"     the outcome recorded in last, and pushed on fires
--   "deposed"  this owner does not hold this fence any more: nothing written (detail: the holder)
--   "gone"     no such schedule (deleted meanwhile)
--   "moved"    the schedule is not due at ARGV[5] any more (fired or changed meanwhile; detail: next)
--
-- uses: guard   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local leader, schedules, fires = KEYS[1], KEYS[2], KEYS[3]
local owner, fence, name, mode, due = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])

-- ---- all or nothing (guard.lua): every key checked before the first write ----
do
  local refused = guard({{leader, "string"}, {schedules, "hash"}, {fires, "list"}})
  if refused then return refused end
end
if redis.call("GET", leader) ~= owner .. " " .. tostring(fence) then
  return {"deposed", redis.call("GET", leader) or ""}
end
local raw = redis.call("HGET", schedules, name)
if not raw then return {"gone"} end
local ok, spec = pcall(cjson.decode, raw)
if not ok or type(spec) ~= "table" then
  return redis.error_reply("CORRUPT crawl key " .. schedules .. " field " .. name ..
    " is not a JSON object: nothing was done (delete the schedule and add it again)")
end
local outcome = nil
if mode == "done" then
  local okd, decoded = pcall(cjson.decode, ARGV[6])
  if not okd or type(decoded) ~= "table" then
    return redis.error_reply("firing.lua: the outcome is not a JSON object")
  end
  outcome = decoded
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = spec.last

if mode == "claim" then
  if tonumber(spec.next) ~= due then return {"moved", tostring(spec.next)} end
  if type(last) == "table" and last.state == "firing" then return {"moved", "firing"} end
  spec.next = tonumber(ARGV[6])
  spec.last = {due = due, at = now, state = "firing", fence = fence, owner = owner,
               times = tonumber(ARGV[7]) or 1}
  redis.call("HSET", schedules, name, cjson.encode(spec))
  return {"claimed"}
end

if type(last) ~= "table" or tonumber(last.due) ~= due then return {"moved", tostring(spec.next)} end

if mode == "adopt" then
  if last.state ~= "firing" or (tonumber(last.fence) or 0) >= fence then
    return {"moved", tostring(spec.next)}
  end
  last.adopted_from = last.fence
  last.fence, last.owner = fence, owner
  redis.call("HSET", schedules, name, cjson.encode(spec))
  return {"adopted"}
end

-- done
if last.state ~= "firing" or tonumber(last.fence) ~= fence then return {"moved", tostring(spec.next)} end
for k, v in pairs(outcome) do last[k] = v end
last.finished = now
spec.last = last
redis.call("HSET", schedules, name, cjson.encode(spec))
last.schedule = name
redis.call("LPUSH", fires, cjson.encode(last))
redis.call("LTRIM", fires, 0, 199)
return {"done"}
