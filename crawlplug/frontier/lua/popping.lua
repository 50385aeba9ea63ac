-- popping.lua: leasing queued requests to a node, shared by the script that pops alone
-- (pop.lua) and the admission that pops after it in the same call (admit.lua's ARGV[5]:
-- Frontier.admit_and_pop); not a script of its own: the loader puts it in front of the
-- scripts whose header uses it. Uses guard.lua, leases.lua and domains.lua (the script
-- calls dq_keys first).
--
-- Its keys are given to pop_setup, not read from fixed KEYS positions, so each script
-- keeps its own layout. A script then, all or nothing:
--   before its first write: guard(pop_spec(spec)), the typed checks of the keys a pop
--     writes (with its own), and pop_read_run(), the run's state and limits (a read);
--   then pop_take(): the leases, returned as pop.lua's reply. A plain pop's queue,
--     requests and deliveries are checked by the reads pop_take makes of them before its
--     first write; a script that writes before pop_take (an admission) checks those
--     keys itself, with its own checks.
-- pcall(redis.replicate_commands) must have been called before pop_take (it asks TIME).

-- the pop's keys (queue, requests, leases, leased, deliveries, stats, run), its
-- parameters (node, n, lease_ms, order) and the run's fields pop_read_run read
local P = {}

local function pop_setup(queue, requests, leases, leased, deliveries, stats, run, node, n, lease_ms, order)
  P.queue, P.requests, P.leases, P.leased, P.deliveries, P.stats, P.run = queue, requests, leases, leased,
    deliveries, stats, run
  P.node, P.n, P.lease_ms, P.order = node, n, lease_ms, order
end

-- the keys a pop writes, appended to spec (guard.lua)
local function pop_spec(spec)
  spec[#spec + 1] = {P.leases, "zset"}
  spec[#spec + 1] = {P.leased, "hash"}
  spec[#spec + 1] = {P.stats, "counters"}
  if P.order == "domain" then
    -- the per-domain queue's keys, by a pop that takes from it (an admission sent before a
    -- plain queue's pop touches none of them either: admit.lua checks them only then)
    spec[#spec + 1] = {P.queue, "zset"}
    spec[#spec + 1] = {P.requests, "hash"}
    spec[#spec + 1] = {P.deliveries, "hash"}
    for _, key in ipairs({D.dq, D.domains}) do spec[#spec + 1] = {key, "zset"} end
    for _, key in ipairs({D.state, D.conf}) do spec[#spec + 1] = {key, "hash"} end
  end
  return spec
end

-- the run's state and crawl-wide limits (crawlplug.crawl.control): read only, so before
-- the first write; nil, or the refusal of a run key of the wrong type
local function pop_read_run()
  local run = redis.pcall("HMGET", P.run, "state", "lim_pages", "lim_items", "lim_errors", "lim_timeout", "started")
  if run.err then return refused_kind(P.run, "hash") end
  P.run_fields = run
  return nil
end

-- how many requests may be leased now: a run ended by a limit or stopped leases nothing,
-- a page limit at most what is left of it after the pages done and the leases held
-- (read when the pop runs: after an admission's acks in the same call)
local function pop_allowed(now)
  local n, run = P.n, P.run_fields
  if run[1] == "limit" or run[1] == "stopped" then return 0 end
  local pages, items, errors = tonumber(run[2]) or 0, tonumber(run[3]) or 0, tonumber(run[4]) or 0
  local timeout, started = tonumber(run[5]) or 0, tonumber(run[6])
  if n > 0 and (pages > 0 or items > 0 or errors > 0) then
    local done = redis.call("HMGET", P.stats, "acked", "items", "spider_errors")
    if pages > 0 then n = math.min(n, pages - (tonumber(done[1]) or 0) - redis.call("ZCARD", P.leases)) end
    if items > 0 and (tonumber(done[2]) or 0) >= items then n = 0 end
    if errors > 0 and (tonumber(done[3]) or 0) >= errors then n = 0 end
  end
  if n > 0 and timeout > 0 and started and now >= started + timeout then n = 0 end
  return n
end

-- order "domain": ready domains, longest waiting first; each takes an equal share of the
-- n slots (one request if it has a delay), within its free concurrency. Domains with no
-- delay that filled their share get another pass while slots remain, so one domain alone
-- can still fill a whole batch.
local function pop_domains(n, now, deadline, out)
  local requests, leases, leased, deliveries, stats, node = P.requests, P.leases, P.leased, P.deliveries,
    P.stats, P.node
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
    redis.call("HSET", leased, id, node .. "|" .. score .. "|" .. d .. "|" .. domain)
    out[#out + 1] = id
    out[#out + 1] = payload
    out[#out + 1] = d
    out[#out + 1] = report
    return true
  end

  local leased_count = 0
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
  return leased_count, redelivered, orphans
end

-- the plain queue: the whole batch in a few commands (guard.lua's variadic, checked_hmget),
-- doing what pop_domains' lease() does one by one; the reads come first, as the checks of
-- their keys. Returns the counts, or nil and the refusal of a key of the wrong type.
local function pop_plain(n, deadline, out)
  local queue, requests, deliveries, node = P.queue, P.requests, P.deliveries, P.node
  local leased_count, redelivered, orphans = 0, 0, 0
  local picked = redis.pcall(P.order == "max" and "ZREVRANGE" or "ZRANGE", queue, 0, n - 1, "WITHSCORES")
  if picked.err then return nil, refused_kind(queue, "zset") end
  if #picked > 0 then
    local ids = {}
    for j = 1, #picked, 2 do ids[#ids + 1] = picked[j] end
    local payloads = checked_hmget(requests, ids)
    if not payloads then return nil, refused_kind(requests, "hash") end
    local counts = checked_hmget(deliveries, ids)
    if not counts then return nil, refused_kind(deliveries, "hash") end
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
    variadic("ZADD", P.leases, deadlines)
    variadic("HSET", P.leased, infos)
  end
  return leased_count, redelivered, orphans
end

-- The leases a pop gave, as the node's call record keeps them (record.lua; pop_replay
-- reads it): "<ms until the next domain is ready, or -> <id>:<report> ...". Read off
-- pop_take's reply.
local function pop_record_text(out)
  if P.order ~= "domain" then
    local ids = {"-"}
    for j = 1, #out - 1, 3 do ids[#ids + 1] = out[j] end
    return table.concat(ids, " ")
  end
  local parts = {tostring(out[#out - 1])}
  for j = 1, #out - 2, 4 do parts[#parts + 1] = out[j] .. ":" .. out[j + 3] end
  return table.concat(parts, " ")
end

-- how many requests wait in the queue this pop reads, after it: the last element of every
-- pop's reply, so a node knows whether the crawl holds work for it without a call of its own
-- (the Scheduler's has_pending_requests and len, crawlplug.scheduler.batch)
local function queued_now()
  if P.order == "domain" then return redis.call("ZCARD", D.dq) end
  return redis.call("ZCARD", P.queue)
end

-- A pop sent again after its reply was lost (its call id in the node's record): the leases
-- it gave, as pop_take answered them, for those this node still holds (one reaped and
-- taken by another node since is not given twice). Reads only; the guard's checks came first.
local function pop_replay(text)
  local out, ids, reports = {}, {}, {}
  local first, rest = string.match(text, "^(%S*)%s*(.*)$")
  local wait = tonumber(first) or -1
  for token in string.gmatch(rest or "", "%S+") do
    local id, report = string.match(token, "^([^:]+):?(.*)$")
    ids[#ids + 1] = id
    reports[#ids] = report
  end
  if #ids > 0 then
    local infos = redis.call("HMGET", P.leased, unpack(ids))
    local payloads = redis.call("HMGET", P.requests, unpack(ids))
    local mine = P.node .. "|"
    for j, id in ipairs(ids) do
      local info = infos[j]
      if info and payloads[j] and string.sub(info, 1, #mine) == mine then
        local _, _, d = lease_info(info)
        out[#out + 1] = id
        out[#out + 1] = payloads[j]
        out[#out + 1] = tonumber(d)
        if P.order == "domain" then out[#out + 1] = reports[j] end
      end
    end
  end
  if P.order == "domain" then out[#out + 1] = wait end
  out[#out + 1] = queued_now()
  return out
end

-- Lease up to n requests (pop_setup's), in queue order: a flat list {id, payload,
-- deliveries, ...}; order "domain": four elements per request and then the ms until the
-- next domain is ready (pop.lua's header); last, the requests still queued (queued_now). A
-- pop that may lease nothing (n = 0, or a limit reached) returns {queued} (order "domain":
-- {-1, queued}) and writes nothing.
local function pop_take()
  local now = redis_now_ms()
  local n = pop_allowed(now)
  if n <= 0 then
    if P.order == "domain" then return {-1, queued_now()} end
    return {queued_now()}
  end
  local deadline = now + P.lease_ms
  local out = {}
  local leased_count, redelivered, orphans
  if P.order == "domain" then
    leased_count, redelivered, orphans = pop_domains(n, now, deadline, out)
  else
    leased_count, redelivered, orphans = pop_plain(n, deadline, out)
    if leased_count == nil then return redelivered end -- the refusal of a key read first
  end
  if leased_count > 0 then redis.call("HINCRBY", P.stats, "leased", leased_count) end
  if redelivered > 0 then redis.call("HINCRBY", P.stats, "redelivered", redelivered) end
  if orphans > 0 then redis.call("HINCRBY", P.stats, "orphan_ids", orphans) end
  if P.order == "domain" then
    local first = redis.call("ZRANGE", D.domains, 0, 0, "WITHSCORES")
    local wait = -1
    if #first > 0 and first[2] ~= "inf" then
      wait = math.max(0, tonumber(first[2]) - now)
    end
    out[#out + 1] = wait
  end
  out[#out + 1] = queued_now()
  return out
end
