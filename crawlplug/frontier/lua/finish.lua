-- finish.lua: record the end of a run at the moment a node finds the whole
-- crawl done: the same step that lets every node close with "finished". A
-- node that started meanwhile is a producer (join.lua registers it so,
-- atomically), so the run does not end under it: it goes on in that run.
--
-- KEYS[1] run         hash  the current run (see join.lua)
-- KEYS[2] runs        hash  run id -> JSON summary of each ended run
-- KEYS[3] producers   zset  node id -> deadline, nodes still reading start requests
-- KEYS[4] queue       zset  } the crawl's own queue, per-domain queue, leases
-- KEYS[5] dq          zset  } and start entries (a sharded crawl's shards are
-- KEYS[6] leases      zset  } checked by the caller just before: new work in
-- KEYS[7] start_urls  list  } a shard needs a producer or a lease; start_urls of
--                           another type is not counted: guard.lua start_entries)
-- KEYS[8..last-1]     lists the crawl's lanes start_urls:<lane> the node reads: work too
-- KEYS[last] epoch    str   the crawl's epoch
-- ARGV[1] node id
-- ARGV[2] run id the node is in
-- ARGV[3] reason recorded ("finished")
-- ARGV[4] the run's totals as JSON (pages, enqueued, filtered, dead, ...: the
--         node reads them over every part; nothing moves when the crawl is done)
-- ARGV[5] the node's epoch (epoch.lua)
-- A run an operator is draining (`crawlplug stop --drain`: state "draining")
-- ends the same way when its queue has run out, but as stopped: state
-- "stopped", reason "stopped", by the operator who drained it; start entries
-- still waiting do not count as work then (no node takes them while it drains).
-- Returns {"finished", ended ms} (or {"stopped", ended ms} for a drained run)
-- when recorded (by this call or an earlier one), {"busy"} when work or a
-- producer appeared, or {state} when the run ended otherwise (a limit, an
-- operator) or is no longer the current one ({"gone"}).
--
-- uses: guard epoch leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local run_key, runs_key, producers = KEYS[1], KEYS[2], KEYS[3]
local node, id, reason, totals = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

do local stale = epoch_guard() if stale then return stale end end
do
  local refused = guard({{run_key, "hash"}, {runs_key, "hash"}, {producers, "zset"}, {KEYS[4], "zset"},
                         {KEYS[5], "zset"}, {KEYS[6], "zset"}})
  if refused then return refused end
end
pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local ok, summary = pcall(cjson.decode, totals)
if not ok or type(summary) ~= "table" then
  return redis.error_reply("finish.lua: the totals are not a JSON object")
end
local run = redis.call("HMGET", run_key, "id", "state", "ended", "started", "incremental", "epoch", "drain_by")
if run[1] ~= id then return {"gone"} end
if run[2] == "finished" then return {"finished", tonumber(run[3])} end
if run[2] ~= "running" and run[2] ~= "draining" then return {run[2] or "gone"} end
local draining = run[2] == "draining"
local now = redis_now_ms()
local work = redis.call("ZCARD", KEYS[4]) + redis.call("ZCARD", KEYS[5]) + redis.call("ZCARD", KEYS[6])
-- start entries waiting (start_entries: guard.lua) are work, unless the run drains
if not draining then work = work + start_entries(KEYS[7]) + lane_entries(8, #KEYS - 1) end
local others = live_count(producers, now)
if is_live(producers, node, now) then others = others - 1 end -- the caller is done producing
if work > 0 or others > 0 then return {"busy"} end

local state, by = "finished", node
if draining then state, reason, by = "stopped", "stopped", run[7] or node end
summary.id = tonumber(id)
summary.state = state
summary.reason = reason
summary.started = tonumber(run[4])
summary.ended = now
summary.by = by
-- the epoch as the token it is: read as a number, a token such as "4e12345678901234" (16 hex
-- digits, one of them an e) is infinite, and cjson refuses to encode it
summary.epoch = run[6]
summary.incremental = run[5] == "1"
if draining then summary.drained = true end
-- encoded before the first write: a summary that cannot be encoded refuses the call whole
local ok_encode, encoded = pcall(cjson.encode, summary)
if not ok_encode then
  return redis.error_reply("finish.lua: the run's summary cannot be encoded (" .. tostring(encoded) .. ")")
end
redis.call("ZREM", producers, node)
redis.call("HSET", run_key, "state", state, "ended", now, "reason", reason, "by", by)
redis.call("HSET", runs_key, id, encoded)
return {state, now}
