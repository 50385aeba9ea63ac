-- release.lua: a closing node hands leases it will not finish back to the
-- queue at once, without waiting for them to expire. Leases it no longer
-- holds are left alone. A request released unstarted does not count as a
-- delivery.
--
-- KEYS[1] leases      zset  request id -> lease deadline
-- KEYS[2] leased      hash  request id -> "node|score|deliveries[|domain]"
-- KEYS[3] queue       zset  request id -> score
-- KEYS[4] deliveries  hash  request id -> deliveries so far
-- KEYS[5] stats       hash  crawl-wide counters
-- KEYS[6..9]          the per-domain queue: dq, domains, dstate, dconf
-- KEYS[10] requests   hash  request id -> payload
-- KEYS[11] start_urls list  a start entry's lease (score "start") returns here
-- KEYS[12..last-1]    lists the crawl's lanes start_urls:<lane> the caller reads: an
--                           entry of one (score "start:<lane>") returns there
-- KEYS[last] epoch    str   the part's epoch (epoch.lua)
-- ARGV[1] node id
-- ARGV[2] "1" if the requests were never started (undo the delivery count)
-- ARGV[3..] lease ids, and last the caller's epoch (epoch.lua)
-- Returns the number of requests put back.
--
-- uses: guard epoch leases domains   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

-- A start_urls key of the wrong type (see starts.lua) leaves start-entry leases
-- where they are (they expire, and return once the key is repaired).

local leases, leased, queue, deliveries, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local node, unstarted = ARGV[1], ARGV[2] == "1"
local prefix = node .. "|"
dq_keys(6)
do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write

-- ---- all or nothing (guard.lua): every key and counter checked before the first write ----
local starts_ok = redis.call("TYPE", KEYS[11])["ok"]
starts_ok = starts_ok == "list" or starts_ok == "none"
-- the records of the leases named, read in one HMGET before the first write: the check of
-- leased when there are any (guard.lua's checked_hmget), guard()'s otherwise
local infos = {}
if NARGV >= 3 then
  infos = checked_hmget(leased, ARGV, 3, NARGV)
  if not infos then return refused_kind(leased, "hash") end
end
do
  local refused = guard({{leases, "zset"}, {leased, "hash"}, {queue, "zset"}, {deliveries, "hash"},
                         {stats, "counters"}, {D.dq, "zset"}, {D.domains, "zset"}, {D.state, "hash"},
                         {D.conf, "hash"}, {KEYS[10], "hash"}})
  if refused then return refused end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local now = redis_now_ms()
local released = 0
local returned = {}
local handled = {} -- an id named twice is released once, as reading it again would find it gone
for j = 3, NARGV do
  local id = ARGV[j]
  local info = not handled[id] and infos[j - 2]
  local _, score, d, domain, freed = lease_info(info or nil)
  if info and string.sub(info, 1, #prefix) == prefix and (not is_start(score) or starts_ok) then
    handled[id] = true
    -- the lease goes first: a write that frees memory, so that on a full Redis the
    -- requeue after it is not refused half-way (see guard.lua)
    redis.call("ZREM", leases, id)
    redis.call("HDEL", leased, id)
    d = tonumber(d) or 1
    if is_start(score) then
      local entry = redis.call("HGET", KEYS[10], id)
      if entry then returned[#returned + 1] = {string.match(score, "^start:(.+)$") or false, entry} end
      redis.call("HDEL", KEYS[10], id)
      d = 0
    else
      requeue(queue, id, score, domain, now)
    end
    if unstarted then d = d - 1 end
    if domain ~= "" then dq_end(domain, id, freed, now) end
    if d > 0 then
      redis.call("HSET", deliveries, id, d)
    else
      redis.call("HDEL", deliveries, id)
    end
    released = released + 1
  end
end
push_back_to_lanes(KEYS[11], 12, #KEYS - 1, returned)
if released > 0 then redis.call("HINCRBY", stats, "released", released) end
return released
