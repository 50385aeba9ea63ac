-- join.lua: a starting node joins the crawl's current run, resumes an
-- interrupted one, or is told to begin the next (crawlplug/runs.py). Atomic,
-- so nodes starting at the same moment agree on one run.
--
-- KEYS[1] run         hash  the current run: id, epoch, state ("starting",
--                           "running", "draining", "finished", "limit",
--                           "stopped"), started, ended, reason, by, incremental;
--                           while "starting": starter (node id) and deadline
--                           (ms); "next" = "new" once an operator asked for a
--                           new run after one that was stopped or hit a limit
-- KEYS[2] runs        hash  run id -> JSON summary of each ended run
-- KEYS[3] epoch       str   the crawl's epoch: a random token, new for each run and reset
-- KEYS[4] nodes       zset  node id -> heartbeat deadline (ms)
-- KEYS[5] producers   zset  node id -> deadline, nodes still reading start requests
-- KEYS[6] queue       zset  } the crawl's own queue, per-domain queue, leases
-- KEYS[7] dq          zset  } and start entries (for a sharded crawl the
-- KEYS[8] leases      zset  } shards' are counted by the caller, ARGV[7])
-- KEYS[9] start_urls  list  } (start_urls of another type is not counted: guard.lua start_entries)
-- KEYS[10..] lists          } the crawl's lanes start_urls:<lane> the node reads
-- ARGV[1] node id
-- ARGV[2] node time-to-live (ms)
-- ARGV[3] "auto"; "new": begin a new run now whatever the state
--         (CRAWLPLUG_FLUSH_ON_START; live nodes of the old one are refused by
--         the epoch guard and join again); "after-limit": as "auto", but a run
--         ended by a limit is followed by a new one as a finished run is (a node
--         started at a terminal, CRAWLPLUG_NEW_RUN_AFTER_LIMIT); never a stopped one
-- ARGV[4] "1" if this node keeps fingerprints across runs (CRAWLPLUG_INCREMENTAL)
-- ARGV[5] ms a node beginning a run has to clear the last one before another takes over
-- ARGV[6] "1" if this node is a worker (CRAWLPLUG_IDLE_CLOSE = 0): a crawl
--         from before runs existed is taken as running, never as finished
-- ARGV[7] requests queued or leased in the shards of a sharded crawl (0 otherwise)
-- ARGV[8] "1" if the crawl holds fingerprints or counters (read by the caller
--         over every part): with no run record, a crawl from before runs existed
-- ARGV[9] a new random epoch token, used if this call begins or adopts a run
-- ARGV[10] the run this node was started for ("" or 0: any; CRAWLPLUG_FOR_RUN, set by
--          `crawlplug start` on its Scrapyd jobs): it joins that run or a later one
--          running, and begins none after it (a node its daemon started after the
--          run had finished would otherwise crawl it all again)
-- Returns {action, run id, epoch, state, detail}:
--   "join"    registered (node, producer) in the running run; detail: other live nodes
--   "resume"  the same, but no node was live and work is left: an interrupted run
--   "begin"   this node must clear what the last run leaves behind, then call
--             runstart.lua; detail: JSON of the run it follows ("" if none); and a sixth
--             element, the fencing token its clearing carries (runclear.lua): the run
--             hash's "fence", one more at each beginning and at each takeover
--   "wait"    another node is beginning run id; detail: that node; call again shortly
--   "ended"   the run ended by a limit or an operator and stays so (for this node); detail: its JSON
--   "over"    the run this node was started for (ARGV[10]) has ended, and no later one
--             runs: nothing written; detail: the ended run's JSON ("" if none)
--
-- uses: guard leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local run_key, runs_key, epoch_key, nodes, producers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local node, ttl, want, incremental = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local grace, worker, shard_work = tonumber(ARGV[5]), ARGV[6] == "1", tonumber(ARGV[7]) or 0
local stored = ARGV[8] == "1"
local new_epoch = ARGV[9]
local for_run = tonumber(ARGV[10]) or 0

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
-- everything that can fail is read before the first write
local now = redis_now_ms()
do
  local refused = guard({{run_key, "hash"}, {runs_key, "hash"}, {epoch_key, "string"}, {nodes, "zset"},
                         {producers, "zset"}, {KEYS[6], "zset"}, {KEYS[7], "zset"}, {KEYS[8], "zset"}})
  if refused then return refused end
end
local epoch = redis.call("GET", epoch_key) or "0"
local raw = redis.call("HGETALL", run_key)
local run = {}
for i = 1, #raw, 2 do run[raw[i]] = raw[i + 1] end
local work = redis.call("ZCARD", KEYS[6]) + redis.call("ZCARD", KEYS[7]) + redis.call("ZCARD", KEYS[8])
  + start_entries(KEYS[9]) + lane_entries(10, #KEYS) + shard_work
local live = live_count(nodes, now)
if is_live(nodes, node, now) then live = live - 1 end

local function register()
  redis.call("ZADD", nodes, now + ttl, node)
  redis.call("ZADD", producers, now + ttl, node)
end

local function last_id()
  local id = tonumber(run.id) or 0
  for _, k in ipairs(redis.call("HKEYS", runs_key)) do
    local n = tonumber(k)
    if n and n > id then id = n end
  end
  return id
end

-- this node was started for an earlier run than the next (ARGV[10]): it begins none, and
-- is told so before anything is written
local function over(previous)
  if for_run > 0 and last_id() + 1 > for_run then
    return {"over", last_id(), epoch, run.state or "", previous or redis.call("HGET", runs_key, run.id or "") or ""}
  end
end

-- the next run: a new epoch (old nodes' calls are refused from now on); the
-- caller clears what the last one leaves behind
local function begin(previous)
  local id = last_id() + 1
  local late = over(previous)
  if late then return late end
  local fence = (tonumber(run.fence) or 0) + 1 -- kept across runs: a token never handed out twice
  epoch = new_epoch
  redis.call("SET", epoch_key, epoch)
  redis.call("DEL", run_key)
  redis.call("HSET", run_key, "id", id, "epoch", epoch, "state", "starting", "starter", node,
    "deadline", now + grace, "incremental", incremental, "created", now,
    "previous", previous and tostring(run.id or "") or "", "fence", fence)
  return {"begin", id, epoch, "starting", previous or "", fence}
end

local state = run.state
if not state then
  -- no run record: a new crawl, or one from before crawl runs existed
  if work > 0 or worker then
    -- work is left (or a worker's endless crawl): it becomes the running run, as it is
    local id = last_id() + 1
    if epoch == "0" then
      epoch = new_epoch -- every node of a run holds a token: a purge (no token) refuses them all
      redis.call("SET", epoch_key, epoch)
    end
    redis.call("HSET", run_key, "id", id, "epoch", epoch, "state", "running", "started", now,
      "incremental", incremental, "adopted", 1)
    register()
    return {(work > 0 and live <= 0) and "resume" or "join", id, epoch, "running", live}
  end
  if stored then -- it ran to its end: the next run starts afresh
    return begin(cjson.encode({id = 0, state = "finished", reason = "finished before crawl runs were recorded"}))
  end
  return begin(nil) -- nothing stored at all: the first run
end

if state == "starting" then
  if tonumber(run.deadline or "0") < now then
    -- its beginner died or stalled: take over (clearing is idempotent), with a new fencing
    -- token, so that the stalled one, when it wakes, clears nothing (runclear.lua)
    redis.call("HSET", run_key, "starter", node, "deadline", now + grace)
    local fence = redis.call("HINCRBY", run_key, "fence", 1)
    local prev = run.previous and run.previous ~= "" and redis.call("HGET", runs_key, run.previous) or ""
    return {"begin", tonumber(run.id), run.epoch, "starting", prev or "", fence}
  end
  return {"wait", tonumber(run.id), run.epoch, "starting", run.starter or ""}
end

-- a node started for the run now running (ARGV[10]) joins it, whatever it was told to do
local joins_its_run = for_run > 0 and (tonumber(run.id) or 0) >= for_run and state == "running"
if want == "new" and not joins_its_run then
  local late = over(nil)
  if late then return late end
  local summary = redis.call("HGET", runs_key, run.id)
  if not summary then
    summary = cjson.encode({id = tonumber(run.id), state = "reset", reason = "reset by CRAWLPLUG_FLUSH_ON_START",
      started = tonumber(run.started), ended = now, by = node})
    redis.call("HSET", runs_key, run.id, summary)
  end
  return begin(summary)
end

if state == "running" then
  if epoch == "0" then
    -- a run without an epoch (imported, or adopted before): every node of a run holds a
    -- token, so that a purge, which deletes it, refuses them all
    epoch = new_epoch
    redis.call("SET", epoch_key, epoch)
    redis.call("HSET", run_key, "epoch", epoch)
  end
  register()
  return {(work > 0 and live <= 0) and "resume" or "join", tonumber(run.id), epoch, "running", live}
end

-- next "new": `crawlplug new-run` after a stop or a limit; "after-limit": this node may begin
-- the next run after a limit (not after a stop: an operator's stop is undone by an operator)
if state == "finished" or run.next == "new" then
  return begin(redis.call("HGET", runs_key, run.id) or "")
end
if want == "after-limit" and state == "limit" then
  local late = over(nil)
  if late then return late end
  local summary = redis.call("HGET", runs_key, run.id)
  if not summary then -- no node closed it (all killed): what the run hash says; the caller adds its totals
    summary = cjson.encode({id = tonumber(run.id), state = "limit", reason = run.reason, by = run.by,
      started = tonumber(run.started), ended = tonumber(run.ended) or now})
    redis.call("HSET", runs_key, run.id, summary)
  end
  return begin(summary)
end

-- ended by a limit or an operator: it stays ended until an operator says otherwise
return {"ended", tonumber(run.id), epoch, state, redis.call("HGET", runs_key, run.id) or ""}
