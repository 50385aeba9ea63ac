-- history.lua: sample one part of a crawl into its history: minute records for a day,
-- hour records for a month. Sent with every heartbeat, in the heartbeat's pipeline
-- (no round trip of its own), once per part (the crawl's own keys, each shard's).
--
-- KEYS[1] minutes  hash  hist:m:<hour>: minute of the hour (0-59) -> record
-- KEYS[2] hours    hash  hist:h:<day>: hour of the day (0-23) -> record
-- KEYS[3] stats    hash  the run's counters (read: acked, enqueued, items, errors)
-- KEYS[4] queue    zset  (read: ZCARD)
-- KEYS[5] dq       zset  the per-domain queue (read: ZCARD)
-- KEYS[6] leases   zset  (read: ZCARD, the requests in flight)
-- KEYS[7] dead     list  (read: LLEN, the run's dead letters)
-- KEYS[8] nodes    zset  node id -> heartbeat deadline (read)   -- the crawl's own keys only
-- KEYS[last] epoch str   the part's epoch (epoch.lua)
-- ARGV[1] the hour (ms // 3600000) the caller named KEYS[1] after, by its estimate of
--         Redis's clock; ARGV[2] the day (ms // 86400000) of KEYS[2]
-- ARGV[3] "1": the crawl's own keys (KEYS[8] given), "0": a shard's
-- ARGV[4] the run the caller joined ("" unknown); its epoch (ARGV[last]) is the run's,
--         or the call is refused (epoch.lua), so the record is of that run
-- ARGV[5] how long a minute record is kept past the end of its hour (ms)
-- ARGV[6] how long an hour record is kept past the end of its day (ms)
-- ARGV[last] the caller's epoch (epoch.lua)
-- Returns {now_ms, written}: written is 0, with nothing written, when Redis's clock is
-- not in the hour and day the keys were named after (the caller's estimate of it was
-- off across a boundary); the next heartbeat writes the sample.
--
-- A record is "<run> <second> <acked> <enqueued> <items> <errors> <queued> <in flight>
-- <dead> <live nodes>": the run ("-" unknown), the second of the minute (of the hour,
-- in an hour record) it was taken at, the run's counters as they stand (cumulative:
-- crawlplug.history.series takes the differences, so a sample written twice counts
-- nothing twice), then the gauges ("-" for the live nodes in a shard). The last sample
-- of a minute (an hour) is its record, under the minute's number; when a new run
-- samples a minute the last run sampled too, the last run's record moves to
-- "<minute>.<its run>" first, so each run keeps its last record. Keys expire on their
-- own (an expiry set to a deadline): a crawl's history never holds more than a day of minutes and a month
-- of hours, whatever it did. crawlplug/history/store.py reads the format.
--
-- uses: guard epoch leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local minutes, hours = KEYS[1], KEYS[2]
local hour, day, base = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == "1"
local run = string.match(ARGV[4], "^%d+$") and ARGV[4] or "-"
local keep_minutes, keep_hours = tonumber(ARGV[5]), tonumber(ARGV[6])

do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write
-- ---- all or nothing (guard.lua): every key checked before the first write ----
do
  local spec = {{minutes, "hash"}, {hours, "hash"}, {KEYS[3], "hash"}, {KEYS[4], "zset"}, {KEYS[5], "zset"},
                {KEYS[6], "zset"}, {KEYS[7], "list"}}
  if base then spec[#spec + 1] = {KEYS[8], "zset"} end
  local refused = guard(spec)
  if refused then return refused end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local now = redis_now_ms()
if math.floor(now / 3600000) ~= hour or math.floor(now / 86400000) ~= day then
  return {now, 0}
end

local counters = redis.call("HMGET", KEYS[3], "acked", "enqueued", "items", "errors")
local function count(i)
  return math.max(0, math.floor(tonumber(counters[i] or "0") or 0)) -- a hand-written text counts 0
end
local live = "-"
if base then live = tostring(live_count(KEYS[8], now)) end
local rest = string.format("%d %d %d %d %d %d %d %s", count(1), count(2), count(3), count(4),
  redis.call("ZCARD", KEYS[4]) + redis.call("ZCARD", KEYS[5]), redis.call("ZCARD", KEYS[6]),
  redis.call("LLEN", KEYS[7]), live)

-- the record of field slot in hash key; a record of another run there moves aside first
local function put(key, slot, second)
  local old = redis.call("HGET", key, slot)
  if old then
    local was = string.match(old, "^(%d+) ")
    if was and was ~= run then redis.call("HSET", key, slot .. "." .. was, old) end
  end
  redis.call("HSET", key, slot, run .. " " .. second .. " " .. rest)
end
local in_hour, in_day = now - hour * 3600000, now - day * 86400000
put(minutes, tostring(math.floor(in_hour / 60000)), math.floor(in_hour % 60000 / 1000))
put(hours, tostring(math.floor(in_day / 3600000)), math.floor(in_day % 3600000 / 1000))
-- the end of a record's keeping, by Redis's clock: a deadline, sent as the time left until it
-- from the script's own TIME (PEXPIRE, which replicas receive as the deadline, PEXPIREAT: one
-- command name fewer than PEXPIREAT beside the PEXPIRE other scripts send, docs/scaling.md)
redis.call("PEXPIRE", minutes, (hour + 1) * 3600000 + keep_minutes - now)
redis.call("PEXPIRE", hours, (day + 1) * 86400000 + keep_hours - now)
return {now, 1}
