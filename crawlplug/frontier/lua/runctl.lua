-- runctl.lua: a change to a crawl's current run by an operator or a node: its
-- crawl-wide limits, a stop, a drain, continuing a run that was stopped or
-- ended by a limit, asking for a new run after one, the summary of an ended
-- run. Each checks the run's state and changes it in one atomic step
-- (crawlplug.crawl.control); the limits themselves are enforced where the
-- work happens: pop.lua leases nothing past them, heartbeat.lua ends the run
-- when one is reached.
--
-- KEYS[1] run    hash  the current run (join.lua): id, state, started, ended,
--                      reason, by; its limits lim_pages, lim_items, lim_errors
--                      (counts) and lim_timeout (ms since "started"), absent =
--                      none; drain_by, drain_at while draining; next = "new"
-- KEYS[2] runs   hash  run id -> JSON summary of each ended run
-- KEYS[3] stats  hash  the run's counters: acked (+ shard_acked of a sharded
--                      crawl), items, spider_errors
-- ARGV[1] action:
--   "limits"   set the run's limits from ARGV[4] ({"lim_pages": n, ...}, 0 =
--              none); ARGV[5] "nx" sets only those the run has none of (a node
--              applying its settings), "set" sets them all (an operator)
--   "stop"     the run ends now, as stopped (from running or draining); ARGV[4]:
--              its totals, for the summary
--   "drain"    the run drains (from running): nodes admit no new request, the
--              queue runs out, then the run ends as stopped (finish.lua)
--   "continue" a run stopped, ended by a limit, or draining runs again, with
--              the limits of ARGV[4] applied first; refused, changing nothing,
--              while one of its limits stays reached
--   "new"      the next node that starts begins a new run (join.lua), after a
--              run that was stopped or ended by a limit
--   "summary"  (re)write the summary of the run, still stopped or ended by a
--              limit, with the totals of ARGV[4] (a node closing)
-- ARGV[2] the run id meant ("" = whichever is current)
-- ARGV[3] who asks (recorded as "by", "drain_by", "continued_by", "next_by")
-- ARGV[4] a JSON object, as the action says ("{}" for none)
-- ARGV[5] "nx" or "set" (action "limits")
-- Returns {outcome, state, run id, limits, reached}: outcome "ok" (done), or
-- why nothing was done: "none" (no run recorded), "gone" (ARGV[2] is not the
-- current run), "state" (not possible in the run's state), "reached"
-- (continue: the limit named by reached, e.g. "closespider_pagecount", is
-- still reached); state the run's state after the call; limits the JSON of
-- the run's limits in force after the call ({"lim_pages": 300, ...}, 0 = none).
--
-- uses: guard leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local run_key, runs_key, stats = KEYS[1], KEYS[2], KEYS[3]
local action, want, by, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local LIMITS = {"lim_pages", "lim_items", "lim_errors", "lim_timeout"}
local ACTIONS = {limits = true, stop = true, drain = true, ["continue"] = true, new = true, summary = true}

-- ---- all or nothing (guard.lua): every key and argument checked before the first write ----
do
  local refused = guard({{run_key, "hash"}, {runs_key, "hash"}, {stats, "counters"}})
  if refused then return refused end
end
if not ACTIONS[action] then return redis.error_reply("runctl.lua: unknown action " .. tostring(action)) end
local ok, arg = pcall(cjson.decode, ARGV[4] or "{}")
if not ok or type(arg) ~= "table" then return redis.error_reply("runctl.lua: ARGV[4] is not a JSON object") end
local given = {}
for _, name in ipairs(LIMITS) do
  if arg[name] ~= nil then
    local v = tonumber(arg[name])
    if not v or v < 0 or v ~= math.floor(v) or v > 1e15 then
      return redis.error_reply("runctl.lua: " .. name .. " must be a whole number >= 0, not " .. tostring(arg[name]))
    end
    given[name] = v
  end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local now = redis_now_ms()
local fields = redis.call("HGETALL", run_key)
local run = {}
for i = 1, #fields, 2 do run[fields[i]] = fields[i + 1] end
if not run.id then return {"none", "", 0, "{}", ""} end
local id = tonumber(run.id) or 0
local state = run.state or ""

local function limits_of(values)
  local out = {}
  for _, name in ipairs(LIMITS) do out[name] = tonumber(values[name]) or 0 end
  return out
end
local function answer(outcome, values, hit)
  return {outcome, run.state or "", id, cjson.encode(limits_of(values or run)), hit or ""}
end
if want ~= "" and want ~= run.id then return answer("gone") end

-- the run's limits with the given ones applied ("nx": only where the run has none)
local function merged()
  local m = limits_of(run)
  for name, v in pairs(given) do
    if mode ~= "nx" or m[name] == 0 then m[name] = v end
  end
  return m
end
local function write_limits(m)
  for _, name in ipairs(LIMITS) do
    if m[name] > 0 then redis.call("HSET", run_key, name, m[name]) else redis.call("HDEL", run_key, name) end
    run[name] = m[name]
  end
end
-- the limit of m the run has reached (heartbeat.lua's rule), or nil
local function reached(m)
  local done = redis.call("HMGET", stats, "acked", "shard_acked", "items", "spider_errors")
  if m.lim_pages > 0 and (tonumber(done[1]) or 0) + (tonumber(done[2]) or 0) >= m.lim_pages then
    return "closespider_pagecount"
  end
  if m.lim_items > 0 and (tonumber(done[3]) or 0) >= m.lim_items then return "closespider_itemcount" end
  if m.lim_errors > 0 and (tonumber(done[4]) or 0) >= m.lim_errors then return "closespider_errorcount" end
  local started = tonumber(run.started)
  if m.lim_timeout > 0 and started and now >= started + m.lim_timeout then return "closespider_timeout" end
  return nil
end
-- the summary of the ended run: what was kept of it, the totals given, the run's own fields
local function write_summary(totals)
  local s = {}
  local old = redis.call("HGET", runs_key, run.id)
  if old then
    local fine, decoded = pcall(cjson.decode, old)
    if fine and type(decoded) == "table" then s = decoded end
  end
  for k, v in pairs(totals) do
    if type(k) == "string" and string.sub(k, 1, 4) ~= "lim_" then s[k] = v end
  end
  s.id, s.state, s.reason, s.by = id, run.state, run.reason, run.by
  s.started, s.ended, s.incremental = tonumber(run.started), tonumber(run.ended), run.incremental == "1"
  for _, name in ipairs(LIMITS) do
    if (tonumber(run[name]) or 0) > 0 then s[name] = tonumber(run[name]) end
  end
  redis.call("HSET", runs_key, run.id, cjson.encode(s))
end

if action == "limits" then
  if state == "finished" then return answer("state") end
  local m = merged()
  write_limits(m)
  return answer("ok", m)
end

if action == "stop" then
  if state ~= "running" and state ~= "draining" then return answer("state") end
  redis.call("HSET", run_key, "state", "stopped", "reason", "stopped", "ended", now, "by", by)
  redis.call("HDEL", run_key, "next")
  run.state, run.reason, run.ended, run.by = "stopped", "stopped", tostring(now), by
  write_summary(arg)
  return answer("ok")
end

if action == "drain" then
  if state ~= "running" then return answer("state") end
  redis.call("HSET", run_key, "state", "draining", "drain_by", by, "drain_at", now)
  run.state = "draining"
  return answer("ok")
end

if action == "continue" then
  if state ~= "stopped" and state ~= "limit" and state ~= "draining" then return answer("state") end
  local m = merged()
  local hit = reached(m)
  if hit then return answer("reached", m, hit) end
  write_limits(m)
  redis.call("HSET", run_key, "state", "running", "continued_by", by, "continued_at", now)
  redis.call("HDEL", run_key, "ended", "reason", "by", "drain_by", "drain_at", "next", "next_by", "next_at")
  redis.call("HDEL", runs_key, run.id) -- no longer an ended run
  run.state = "running"
  return answer("ok", m)
end

if action == "new" then
  if state ~= "stopped" and state ~= "limit" then return answer("state") end
  redis.call("HSET", run_key, "next", "new", "next_by", by, "next_at", now)
  return answer("ok")
end

-- "summary"
if state ~= "stopped" and state ~= "limit" then return answer("state") end
write_summary(arg)
return answer("ok")
