-- reap.lua: put expired leases back in the queue (their holder stopped
-- renewing them: killed, frozen or cut off). Idempotent; any node may run it.
-- A request delivered CRAWLPLUG_MAX_DELIVERIES times goes to the dead letters.
-- A node whose heartbeat deadline passed (3 missed heartbeats) is declared dead
-- here, and the per-domain slots of its leases are freed at once (below): its
-- leases themselves wait for their lease timeout, as it may still be downloading.
--
-- KEYS[1] leases      zset  request id -> lease deadline (ms)
-- KEYS[2] leased      hash  request id -> "node|score|deliveries[|domain]"
-- KEYS[3] queue       zset  request id -> score
-- KEYS[4] deliveries  hash  request id -> deliveries so far
-- KEYS[5] requests    hash  request id -> payload
-- KEYS[6] dead        list  dead letters: JSON header, "\n", payload
-- KEYS[7] stats       hash  crawl-wide counters
-- KEYS[8] nodes       zset  node id -> heartbeat deadline
-- KEYS[9] producers   zset  node id -> deadline
-- KEYS[10..13]        the per-domain queue: dq, domains, dstate, dconf
-- KEYS[14] start_urls list  a start entry's lease (score "start") returns here
-- KEYS[15] series     hash  per-10 s counters (admit.lua) and gauges sampled
--                           here: "q:<bucket>" queued, "f:<bucket>" in flight,
--                           "x:<bucket>" dead letters, and per 5 s "r:<slot>"
--                           "<ms> <work left>" (queued + in flight + start
--                           entries, and when: the ETA's trend); buckets older
--                           than an hour are deleted here
-- KEYS[16] graveyard  hash  node id -> "<declared dead ms, 0: not here> <last change ms>
--                           <leases requeued> <dead-lettered>": the nodes whose heartbeat
--                           expired and what became of their leases; an entry unchanged
--                           for an hour is deleted here
-- KEYS[17..]         lists the crawl's lanes start_urls:<lane> the caller reads: an
--                           expired lease of an entry of one (score "start:<lane>") returns
--                           there, and their entries count as work left in the series
-- ARGV[1] max deliveries
-- ARGV[2] most leases to reap in this call
-- Returns {requeued, dead}; counts "slots_freed" in stats (leases of dead nodes whose
-- per-domain slot was freed before they expired).
-- A start_urls key of the wrong type (see starts.lua) leaves expired start-entry
-- leases where they are (they cannot go back); every other lease is reaped.
--
-- uses: guard leases domains   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local leases, leased, queue, deliveries, requests, dead, stats, nodes, producers =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local max_deliveries, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
dq_keys(10)

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local now = redis_now_ms()

-- ---- all or nothing (guard.lua): every key and counter checked before the first write ----
local starts_ok = redis.call("TYPE", KEYS[14])["ok"]
starts_ok = starts_ok == "list" or starts_ok == "none"
-- the nodes that died (for the graveyard, below) and the leases expired: reads made on
-- every path before the first write, so they are the checks of nodes and leases
-- (guard.lua's checked_read). Nothing below writes leases before the expired are taken.
local died, expired
do
  local refused
  died, refused = checked_read("zset", "ZRANGEBYSCORE", nodes, "-inf", now)
  if refused then return refused end
  expired, refused = checked_read("zset", "ZRANGEBYSCORE", leases, "-inf", now, "LIMIT", 0, limit)
  if refused then return refused end
  refused = guard({{leased, "hash"}, {queue, "zset"}, {deliveries, "hash"},
                   {requests, "hash"}, {dead, "list"}, {stats, "counters"},
                   {producers, "zset"}, {D.dq, "zset"}, {D.domains, "zset"}, {D.state, "hash"},
                   {D.conf, "hash"}, {KEYS[15], "any"}, {KEYS[16], "any"}}) -- statistics: below
  if refused then return refused end
end
-- ---- end of the checks ----

redis.call("ZREMRANGEBYSCORE", nodes, "-inf", now)
redis.call("ZREMRANGEBYSCORE", producers, "-inf", now)

-- ---- the nodes declared dead now free their per-domain slots ----
-- Their requests in flight stop counting against their domains' concurrency (and a
-- request leased but not yet sent stops holding its domain's delay), so live nodes
-- crawl those domains meanwhile; the leases stay until they expire (below, at a later
-- call), marked "|f" like a lease whose download ended, so nothing frees a slot twice.
-- Read only when a node died: one HGETALL of the leases held crawl-wide.
if #died > 0 then
  local dead_now = {}
  for _, id in ipairs(died) do dead_now[id] = true end
  local held = redis.call("HGETALL", leased)
  local freed_slots = 0
  for j = 1, #held, 2 do
    local holder, _, _, domain, freed = lease_info(held[j + 1])
    if dead_now[holder] and domain ~= "" and freed ~= "f" then
      redis.call("HSET", leased, held[j], held[j + 1] .. "|f")
      dq_end(domain, held[j], "", now)
      freed_slots = freed_slots + 1
    end
  end
  if freed_slots > 0 then redis.call("HINCRBY", stats, "slots_freed", freed_slots) end
end

local starts = KEYS[14]
local requeued, killed, restarted = 0, 0, 0
local returned = {}
local fates = {} -- holder node id -> {requeued, dead-lettered}, for the graveyard
local function fate(holder, i)
  if not holder or holder == "" then return end
  fates[holder] = fates[holder] or {0, 0}
  fates[holder][i] = fates[holder][i] + 1
end
for _, id in ipairs(expired) do
  local holder, score, d, domain, freed = lease_info(redis.call("HGET", leased, id))
  if not is_start(score) or starts_ok then
    redis.call("ZREM", leases, id)
    redis.call("HDEL", leased, id)
    local payload = redis.call("HGET", requests, id)
    if payload and is_start(score) then
      -- a start entry whose node died before storing its requests: first in line again, in its list
      returned[#returned + 1] = {string.match(score, "^start:(.+)$") or false, payload}
      redis.call("HDEL", requests, id)
      redis.call("HDEL", deliveries, id)
      restarted = restarted + 1
      fate(holder, 1)
    elseif payload then
      d = tonumber(d) or 1
      if d >= max_deliveries then
        local header = cjson.encode({id = id, reason = "delivered " .. d .. " times without being acknowledged",
                                     deliveries = d, node = holder or "", at = now})
        redis.call("RPUSH", dead, header .. "\n" .. payload)
        redis.call("HDEL", requests, id)
        redis.call("HDEL", deliveries, id)
        killed = killed + 1
        fate(holder, 2)
      else
        requeue(queue, id, score, domain, now)
        redis.call("HSET", deliveries, id, d)
        requeued = requeued + 1
        fate(holder, 1)
      end
    end
    if domain ~= "" then dq_end(domain, id, freed, now) end
  end
end
if requeued > 0 then redis.call("HINCRBY", stats, "reaped", requeued) end
if killed > 0 then redis.call("HINCRBY", stats, "dead", killed) end
push_back_to_lanes(starts, 17, #KEYS, returned)
if restarted > 0 then redis.call("HINCRBY", stats, "start_returned", restarted) end

-- forget series buckets older than an hour (360 buckets of 10 s), a few per call
local series = KEYS[15]
reset_statistic(series) -- the series and the graveyard of the wrong type: started again (guard.lua)
reset_statistic(KEYS[16])
local bucket = math.floor(now / 10000)
local waiting, inflight = redis.call("ZCARD", queue) + redis.call("ZCARD", D.dq), redis.call("ZCARD", leases)
-- start entries of a start_urls of the wrong type are not counted (LLEN would fail the
-- script here, after the reaping above: not all-or-nothing)
local entries = (starts_ok and redis.call("LLEN", starts) or 0) + lane_entries(17, #KEYS)
redis.call("HSET", series,
  "q:" .. bucket, waiting,
  "f:" .. bucket, inflight,
  "x:" .. bucket, redis.call("LLEN", dead),
  "r:" .. math.floor(now / 5000), now .. " " .. (waiting + inflight + entries))
local oldest = bucket - 360
local trimmed = tonumber(redis.call("HGET", series, "trimmed") or "") or oldest
local upto = math.min(oldest, trimmed + 50)
for b = trimmed + 1, upto do
  redis.call("HDEL", series, "a:" .. b, "e:" .. b, "q:" .. b, "f:" .. b, "x:" .. b, "r:" .. 2 * b, "r:" .. 2 * b + 1)
end
if upto > trimmed or redis.call("HEXISTS", series, "trimmed") == 0 then
  redis.call("HSET", series, "trimmed", math.max(upto, trimmed))
end

-- the graveyard: nodes found dead (their heartbeat expired) and what became of their
-- leases, so `crawlplug status` and the dashboard show them as dead until the next run (an hour at most)
-- instead of dropping them; only written when a node died or a lease of one expired
local graveyard = KEYS[16]
if #died > 0 or next(fates) then
  local function grave(id, since)
    local old = redis.call("HGET", graveyard, id) or ""
    local was, _, r, x = string.match(old, "^(%d+) (%d+) (%d+) (%d+)$")
    local f = fates[id] or {0, 0}
    fates[id] = nil
    redis.call("HSET", graveyard, id, table.concat({since or tonumber(was) or 0, now,
      (tonumber(r) or 0) + f[1], (tonumber(x) or 0) + f[2]}, " "))
  end
  for _, id in ipairs(died) do grave(id, now) end
  local rest = {}
  for id in pairs(fates) do rest[#rest + 1] = id end
  table.sort(rest) -- the same writes on a replica, whatever the table's order
  for _, id in ipairs(rest) do grave(id, nil) end
  local all = redis.call("HGETALL", graveyard)
  for j = 1, #all, 2 do
    local changed = tonumber(string.match(all[j + 1], "^%d+ (%d+) ") or "")
    if not changed or changed < now - 3600000 then redis.call("HDEL", graveyard, all[j]) end
  end
  redis.call("PEXPIRE", graveyard, 3600000)
end

requeued = requeued + restarted
return {requeued, killed}
