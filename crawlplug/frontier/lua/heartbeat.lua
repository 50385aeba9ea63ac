-- heartbeat.lua: mark a node alive, publish its metrics, count what it did in the
-- run's counters, renew its leases, and tell it the state of the run.
--
-- KEYS[1] nodes       zset  node id -> heartbeat deadline (ms)
-- KEYS[2] leases      zset  request id -> lease deadline (ms)
-- KEYS[3] leased      hash  request id -> "node|score|deliveries"
-- KEYS[4] node        hash  this node's metrics (kept an hour after its last heartbeat)
-- KEYS[5] producers   zset  node id -> deadline, nodes still reading start requests
-- KEYS[6] control     hash  crawl-wide switches set by operators ("paused"), and
--                           "lost": a node found Redis had lost the crawl's data
-- KEYS[7] stats       hash  the run's counters
-- KEYS[8] run         hash  the current run (join.lua), with its crawl-wide limits
--                           (lim_pages, lim_items, lim_errors, lim_timeout: crawlplug.crawl.control)
-- KEYS[9] counted     hash  "<node>|<counter>" -> the node's total of that counter the
--                           run's counters hold (a run's state: a new run starts without)
-- KEYS[10] reply      str   the node's call record (record.lua): checked, and kept alive
-- KEYS[11] epoch      str   the crawl's epoch (epoch.lua)
-- ARGV[1] node id
-- ARGV[2] lease duration (ms)
-- ARGV[3] node time-to-live (ms) without a heartbeat (3 heartbeats: then reap.lua declares
--         it dead); as a producer it lives as long as a lease (ARGV[2]), if longer: a
--         node stalled in its start() must not let the crawl end under it
-- ARGV[4] "1" if this node is still producing start requests, else "0"
-- ARGV[5] "<caller> <c>": the node's last recorded admission (record.lua; "" checks
--         nothing): a record older than it refuses the heartbeat with "ROLLBACK ...",
--         writing nothing
-- ARGV[6] M = number of metric field/value pairs, then 2*M arguments
-- then C = number of counters, then C pairs (counter, the node's total of it in this
-- run: its items, errors, spider_errors and, in a sharded crawl, shard_acked, pages
-- acknowledged in the shards). The run's counter gets what is new since the total
-- KEYS[9] counted, so a heartbeat sent again (redis-py's retry of a lost reply, a beat
-- whose reap was refused) counts nothing twice; after Redis went back in time it gets
-- what the restored state had not counted. A total below the one counted adds nothing.
-- then the ids of the leases this node believes it holds
-- and last the node's epoch (epoch.lua)
-- Returns {now_ms, paused, run state, data lost, lost ids...}: paused is 1
-- while an operator has paused the crawl; the run state is join.lua's (""
-- without a run); data lost is 1 while control "lost" is set (the crawl must
-- not read as finished: what Redis lost is not crawled); the ids are those
-- this node no longer holds (reaped after it stalled past the lease timeout);
-- it must not ack or release them.
--
-- The first heartbeat that finds one of the run's limits reached (pages done:
-- acked + shard_acked; items; spider_errors; the run's age) ends the run by it:
-- state "limit", reason "closespider_pagecount" (itemcount, errorcount, timeout),
-- ended, by. Every node reads the state in its reply and closes with the reason.
--
-- Lease renewal must go through on a full Redis (maxmemory reached): else an
-- OOM longer than the lease timeout gets every page in flight reaped and
-- fetched again. Redis 7 runs it with flags=allow-oom (lua/__init__.py);
-- older servers let it through because its first write frees memory
-- (first_write_allowed_when_full, guard.lua).
--
-- uses: guard epoch record leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local nodes, leases, leased, nodekey, producers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local counted, reply = KEYS[9], KEYS[10]
local node, lease_ms, ttl_ms, producing = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local m = tonumber(ARGV[6])
local c = tonumber(ARGV[7 + 2 * m])

do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write
do -- record.lua: Redis went back in time past this node's last recorded admission?
  local caller, confirmed = record_check_arg(ARGV[5])
  local refused = confirmed > 0 and rollback_guard(caller, confirmed, (call_record(reply)))
  if refused then return refused end
end
-- ---- all or nothing (guard.lua): every key and value checked before the first write ----
-- the totals this node reports, and what the run's counters and counted hold of them: each an
-- integer that an addition cannot overflow (guard.lua's is_integer: 18 characters at most)
local names, fields, totals, stored, held = {}, {}, {}, {}, {}
-- reads made on every path before the first write are the checks of their keys (guard.lua's
-- checked_read): the run (its state and limits, below: nothing here writes it before it is
-- read), the records of the leases renewed (when there are any) and, when counters come,
-- what counted holds of them
local run, infos
do
  local refused
  run, refused = checked_read("hash", "HMGET", KEYS[8], "state", "lim_pages", "lim_items", "lim_errors",
                              "lim_timeout", "started")
  if refused then return refused end
  infos, refused = renew_read(leased, 8 + 2 * m + 2 * c, NARGV)
  if refused then return refused end
  for j = 8 + 2 * m, 7 + 2 * m + 2 * c, 2 do
    if not is_integer(ARGV[j + 1]) then
      return redis.error_reply("heartbeat.lua: counter " .. ARGV[j] .. " needs an integer, got " .. ARGV[j + 1])
    end
    names[#names + 1] = ARGV[j]
    fields[#fields + 1] = node .. "|" .. ARGV[j]
    totals[#totals + 1] = tonumber(ARGV[j + 1])
  end
  if #names > 0 then
    stored, refused = checked_read("hash", "HMGET", counted, unpack(fields))
    if refused then return refused end
  end
  refused = guard({{nodes, "zset"}, {leases, "zset"}, {leased, "hash"}, {nodekey, "any"},
                   {producers, "zset"}, {KEYS[6], "hash"}, {KEYS[7], "counters"}, {KEYS[8], "hash"},
                   {counted, "hash"}})
  if refused then return refused end
  if #names > 0 then
    held = redis.call("HMGET", KEYS[7], unpack(names))
    for i, name in ipairs(names) do
      if stored[i] and not is_integer(stored[i]) then
        return corrupt_reply(counted, "field " .. fields[i] .. " holds " .. shown(stored[i]) .. ", not an integer")
      end
      if held[i] and not is_integer(held[i]) then
        return corrupt_reply(KEYS[7], "field " .. name .. " holds " .. shown(held[i]) .. ", not an integer")
      end
    end
  end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local now = redis_now_ms()

reset_statistic(nodekey) -- this node's metrics of the wrong type: written anew (guard.lua)
first_write_allowed_when_full(nodekey)
redis.call("ZADD", nodes, now + ttl_ms, node)
if producing == "1" then
  redis.call("ZADD", producers, now + math.max(ttl_ms, lease_ms), node)
else
  redis.call("ZREM", producers, node)
end
do -- its metrics, in one HSET
  local metrics = {"last_seen", now}
  for j = 7, 6 + 2 * m do metrics[#metrics + 1] = ARGV[j] end
  variadic("HSET", nodekey, metrics)
end
-- kept an hour past its last heartbeat: a node that dies is shown with its last numbers
-- for the hour reap.lua keeps it in the graveyard
redis.call("PEXPIRE", nodekey, math.max(ttl_ms * 10, ttl_ms + 3600000))
for i, name in ipairs(names) do -- what is new since the totals counted (the header)
  local new = totals[i] - (tonumber(stored[i]) or 0)
  if new > 0 then
    redis.call("HINCRBY", KEYS[7], name, string.format("%d", new))
    redis.call("HSET", counted, fields[i], ARGV[8 + 2 * m + 2 * (i - 1) + 1])
  end
end

-- the run's crawl-wide limits (CLOSESPIDER_*, crawl-wide: crawlplug.crawl.control)
do
  if run[1] == "running" or run[1] == "draining" then
    local pages, items, errors = tonumber(run[2]) or 0, tonumber(run[3]) or 0, tonumber(run[4]) or 0
    local timeout, started = tonumber(run[5]) or 0, tonumber(run[6])
    local done = redis.call("HMGET", KEYS[7], "acked", "shard_acked", "items", "spider_errors")
    local reason
    if pages > 0 and (tonumber(done[1]) or 0) + (tonumber(done[2]) or 0) >= pages then
      reason = "closespider_pagecount"
    elseif items > 0 and (tonumber(done[3]) or 0) >= items then
      reason = "closespider_itemcount"
    elseif errors > 0 and (tonumber(done[4]) or 0) >= errors then
      reason = "closespider_errorcount"
    elseif timeout > 0 and started and now >= started + timeout then
      reason = "closespider_timeout"
    end
    if reason then
      redis.call("HSET", KEYS[8], "state", "limit", "reason", reason, "ended", now, "by", node)
    end
  end
end

local out = {now, redis.call("HEXISTS", KEYS[6], "paused"), redis.call("HGET", KEYS[8], "state") or "",
             redis.call("HEXISTS", KEYS[6], "lost")}
record_renew(reply)
return renew_leases(leases, infos, node, now, lease_ms, 8 + 2 * m + 2 * c, NARGV, out)
