-- pop.lua: lease up to N requests to a node, in queue order, and return them.
--
-- KEYS[1] queue       zset  request id -> score
-- KEYS[2] requests    hash  request id -> payload
-- KEYS[3] leases      zset  request id -> lease deadline (ms, Redis clock)
-- KEYS[4] leased      hash  request id -> "node|score|deliveries[|domain]"
-- KEYS[5] deliveries  hash  request id -> deliveries so far
-- KEYS[6] stats       hash  crawl-wide counters
-- KEYS[7..10]         the per-domain queue: dq, domains, dstate, dconf
--                     (see domains.lua): order "domain" only
-- KEYS[last] epoch    str   the part's epoch (epoch.lua)
-- ARGV[1] node id
-- ARGV[2] N, most requests to lease
-- ARGV[3] lease duration (ms)
-- ARGV[4] "min" (lowest score first), "max" (highest score first) or
--         "domain" (the per-domain queue: ready domains, earliest first)
-- ARGV[5], ARGV[6] (optional) the dedup mode and parameter of an admission
--         pipelined just before this pop (Frontier.admit_and_pop), whose dedup
--         keys, seq and series are then KEYS[11], KEYS[12], KEYS[13] and
--         KEYS[14..] (admit.lua's KEYS[1], [4], [13], [14..]): they are checked
--         too, so that a corrupt key that makes the admission refuse makes the
--         pop refuse as well, and the call changes nothing
-- KEYS[last - 1] run  hash  the current run (crawlplug.frontier.runs): a run ended by a
--                     limit or stopped by an operator leases nothing, and its crawl-wide
--                     limits (lim_pages, lim_items, lim_errors, lim_timeout ms since
--                     "started"; crawlplug.frontier.control) are checked against the
--                     counters in KEYS[6]: a page limit leases at most what is left of it
--                     after the pages done and the leases held. Absent (a shard, a
--                     frontier driven without runs): no limit
-- ARGV[last] the caller's epoch (epoch.lua); KEYS[last] the part's epoch key
-- Returns a flat list {id, payload, deliveries, id, payload, deliveries, ...};
-- order "domain" returns four elements per request, the fourth saying what
-- the node must report on it (admit.lua events): "s" when sent (its domain
-- has a delay, or it is the domain's first request: the domain waits for
-- it), "r" when its download ended (its domain has a delay or a concurrency
-- limit), e.g. "sr", or "" for nothing; and then one more
-- element: milliseconds until the next domain is ready (-1: none waits on
-- its delay). A call that may lease nothing (n = 0, or a limit reached)
-- returns {} (order "domain": {-1}) and writes nothing.
--
-- uses: guard epoch leases domains   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local queue, requests, leases, leased, deliveries, stats =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local node, n, lease_ms, order = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local run_key = KEYS[#KEYS - 1]
dq_keys(7)

do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write
-- ---- all or nothing (guard.lua): every key and counter checked before the first write ----
do
  local spec = {{leases, "zset"}, {leased, "hash"}, {stats, "counters"}}
  if order == "domain" then
    -- the per-domain queue's keys, by a pop that takes from it (an admission sent before a
    -- plain queue's pop touches none of them either: admit.lua checks them only then)
    spec[#spec + 1] = {queue, "zset"}
    spec[#spec + 1] = {requests, "hash"}
    spec[#spec + 1] = {deliveries, "hash"}
    for _, key in ipairs({D.dq, D.domains}) do spec[#spec + 1] = {key, "zset"} end
    for _, key in ipairs({D.state, D.conf}) do spec[#spec + 1] = {key, "hash"} end
  end
  -- a plain pop's queue, requests and deliveries are checked by the reads it makes of
  -- them before its first write (the run's too, below): a pop that takes nothing writes
  -- nothing, and one that takes something read them first
  if NARGV >= 6 then -- an admission's mode and parameter come before the epoch
    -- what that admission checks, this pop checks too: one refuses with the other
    if order ~= "domain" then
      for _, key in ipairs({D.dq, D.domains}) do spec[#spec + 1] = {key, "zset"} end
      for _, key in ipairs({D.state, D.conf}) do spec[#spec + 1] = {key, "hash"} end
    end
    spec[#spec + 1] = {KEYS[12], "int"}
    spec[#spec + 1] = {KEYS[13], "any"} -- the series: a statistic, started again if need be (admit.lua)
    dedup_spec(spec, ARGV[5], KEYS[11], ARGV[6], 14, #KEYS - 2)
  end
  local refused = guard(spec) or guard_bloom_meta(spec)
  if refused then return refused end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local now = redis_now_ms()
local deadline = now + lease_ms

-- the run's crawl-wide limits: read only, before the first write
do
  local run = redis.pcall("HMGET", run_key, "state", "lim_pages", "lim_items", "lim_errors", "lim_timeout", "started")
  if run.err then return refused_kind(run_key, "hash") end
  if run[1] == "limit" or run[1] == "stopped" then n = 0 end
  local pages, items, errors = tonumber(run[2]) or 0, tonumber(run[3]) or 0, tonumber(run[4]) or 0
  local timeout, started = tonumber(run[5]) or 0, tonumber(run[6])
  if n > 0 and (pages > 0 or items > 0 or errors > 0) then
    local done = redis.call("HMGET", stats, "acked", "items", "spider_errors")
    if pages > 0 then n = math.min(n, pages - (tonumber(done[1]) or 0) - redis.call("ZCARD", leases)) end
    if items > 0 and (tonumber(done[2]) or 0) >= items then n = 0 end
    if errors > 0 and (tonumber(done[3]) or 0) >= errors then n = 0 end
  end
  if n > 0 and timeout > 0 and started and now >= started + timeout then n = 0 end
end
if n <= 0 then
  if order == "domain" then return {-1} end
  return {}
end

local out = {}
local orphans, redelivered = 0, 0

-- lease one queued id; false if it had no payload (deleted by hand?)
local function lease(id, score, domain, report)
  local payload = redis.call("HGET", requests, id)
  if not payload then
    redis.call("HDEL", deliveries, id)
    orphans = orphans + 1
    return false
  end
  local d = (tonumber(redis.call("HGET", deliveries, id)) or 0) + 1
  if d > 1 then redelivered = redelivered + 1 end
  redis.call("ZADD", leases, deadline, id)
  local info = node .. "|" .. score .. "|" .. d
  if domain then info = info .. "|" .. domain end
  redis.call("HSET", leased, id, info)
  out[#out + 1] = id
  out[#out + 1] = payload
  out[#out + 1] = d
  if report then out[#out + 1] = report end
  return true
end

local leased_count = 0
if order == "domain" then
  -- Ready domains, longest waiting first; each takes an equal share of the
  -- N slots (one request if it has a delay), within its free concurrency.
  -- Domains with no delay that filled their share get another pass while
  -- slots remain, so one domain alone can still fill a whole batch.
  local ready = redis.call("ZRANGEBYSCORE", D.domains, "-inf", now, "LIMIT", 0, n)
  local remaining = n
  while remaining > 0 and #ready > 0 do
    local quota = math.max(1, math.floor(remaining / #ready))
    local again = {}
    for _, domain in ipairs(ready) do
      if remaining <= 0 then break end
      local delay, conc = dq_limits(domain)
      local state = redis.call("HMGET", D.state, "b:" .. domain, "l:" .. domain)
      local busy = tonumber(state[1]) or 0
      -- a domain's very first request goes out alone, so robots.txt (fetched
      -- before it) can set the domain's Crawl-delay before a second one leaves
      local hold = delay > 0 or not state[2]
      local k = math.min(quota, remaining)
      if hold then k = 1 end
      if conc > 0 then k = math.min(k, conc - busy) end
      local got, more = 0, true
      local report = ""
      if hold then report = "s" end
      if delay > 0 or conc > 0 then report = report .. "r" end
      local last_id
      if k > 0 then
        -- one more than taken: whether the domain has requests left, for free
        local members = dq_first(domain, k + 1)
        more = #members > k
        local prefix = #domain + 2
        for j = 1, math.min(k, #members) do
          local member = members[j]
          redis.call("ZREM", D.dq, member)
          local score = tonumber(string.sub(member, prefix, prefix + 15)) - RANK_OFFSET
          local id = string.sub(member, prefix + 16)
          if lease(id, score, domain, report) then
            got = got + 1
            last_id = id
          end
        end
      end
      if got > 0 then
        busy = busy + got
        redis.call("HSET", D.state, "b:" .. domain, busy)
        add_to_field(D.state, "n:" .. domain, got) -- requests leased so far (its rate)
        if hold then
          -- the delay starts when the node says the request was sent
          redis.call("HSET", D.state, "p:" .. domain, last_id)
        end
        remaining = remaining - got
      end
      if not more then
        redis.call("ZREM", D.domains, domain)
      elseif (conc > 0 and busy >= conc) or (hold and got > 0) then
        redis.call("ZADD", D.domains, "+inf", domain)
      elseif got > 0 then
        redis.call("ZADD", D.domains, now + delay, domain)
        if not hold and got >= k then again[#again + 1] = domain end
      end
      leased_count = leased_count + got
    end
    ready = again
  end
  local first = redis.call("ZRANGE", D.domains, 0, 0, "WITHSCORES")
  local wait = -1
  if #first > 0 and first[2] ~= "inf" then
    wait = math.max(0, tonumber(first[2]) - now)
  end
  if leased_count > 0 then redis.call("HINCRBY", stats, "leased", leased_count) end
  if redelivered > 0 then redis.call("HINCRBY", stats, "redelivered", redelivered) end
  if orphans > 0 then redis.call("HINCRBY", stats, "orphan_ids", orphans) end
  out[#out + 1] = wait
  return out
end

-- the plain queue: the whole batch in a few commands (guard.lua's variadic, checked_hmget),
-- doing what lease() does one by one; the reads come first, as the checks of their keys
local picked = redis.pcall(order == "max" and "ZREVRANGE" or "ZRANGE", queue, 0, n - 1, "WITHSCORES")
if picked.err then return refused_kind(queue, "zset") end
if #picked > 0 then
  local ids = {}
  for j = 1, #picked, 2 do ids[#ids + 1] = picked[j] end
  local payloads = checked_hmget(requests, ids)
  if not payloads then return refused_kind(requests, "hash") end
  local counts = checked_hmget(deliveries, ids)
  if not counts then return refused_kind(deliveries, "hash") end
  variadic("ZREM", queue, ids)
  local deadlines, infos, lost = {}, {}, {}
  -- numbers sent to Redis are formatted ("%.17g") one by one: the deadline once, as text
  local at = string.format("%d", deadline)
  for j, id in ipairs(ids) do
    local payload = payloads[j]
    if not payload then
      lost[#lost + 1] = id -- no payload (deleted by hand?)
    else
      local d = (tonumber(counts[j]) or 0) + 1
      if d > 1 then redelivered = redelivered + 1 end
      deadlines[#deadlines + 1] = at
      deadlines[#deadlines + 1] = id
      infos[#infos + 1] = id
      infos[#infos + 1] = node .. "|" .. picked[2 * j] .. "|" .. (d == 1 and "1" or string.format("%d", d))
      out[#out + 1] = id
      out[#out + 1] = payload
      out[#out + 1] = d
      leased_count = leased_count + 1
    end
  end
  variadic("HDEL", deliveries, lost)
  orphans = #lost
  variadic("ZADD", leases, deadlines)
  variadic("HSET", leased, infos)
end
if leased_count > 0 then redis.call("HINCRBY", stats, "leased", leased_count) end
if redelivered > 0 then redis.call("HINCRBY", stats, "redelivered", redelivered) end
if orphans > 0 then redis.call("HINCRBY", stats, "orphan_ids", orphans) end
return out
