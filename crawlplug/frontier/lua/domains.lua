-- domains.lua: the per-domain polite queue (crawlplug.queues.DomainQueue).
-- Not a script of its own: the loader puts it in front of every script that
-- moves requests into or out of the queue, which then calls
-- dq_keys(first) with the index of the four keys below in its KEYS.
--
-- dq       zset, every score 0, members "<domain>\t<rank><id>": ZRANGEBYLEX
--          over "<domain>\t" yields one domain's requests in priority order,
--          oldest first among equals. One key holds every domain, so every
--          key a script touches is declared and 10,000 domains are one key.
-- domains  zset domain -> time (ms) its next request may start. Holds every
--          domain with queued requests; "+inf" while the domain has all the
--          concurrency it may use in flight (it is woken when a lease ends).
-- dstate   hash "b:<domain>" -> its requests in flight: leased and not yet
--          downloaded (the node reports the end of a download, or the
--          lease ends: acked, released, reaped, dead-lettered);
--          "l:<domain>" -> when its last request was sent (ms, Redis clock);
--          "p:<domain>" -> the lease whose request is leased but not yet
--          sent: a domain with a delay waits for it, so the delay counts
--          from the moment the request really leaves (after robots.txt,
--          local queues), not from the lease; "n:<domain>" -> requests of it
--          leased so far (the dashboard's rate per domain); "c:<domain>" ->
--          requests of it admitted in this run (admit.lua: its page cap)
-- dconf    hash "<source>:<domain>" -> "<delay ms> <concurrency>", "-" for
--          unset; source "o" = the operator at runtime, "s" = the nodes'
--          settings, "r" = robots.txt Crawl-delay; domain "*" = the default;
--          and "cap:o" / "cap:s" -> most requests of one domain admitted in a
--          run, an operator's or the nodes' (CRAWLPLUG_DOMAIN_PAGES; admit.lua)
--
-- A domain's delay: o:<domain>, else s:<domain>, else the larger of the
-- default (o:*, else s:*) and its robots.txt Crawl-delay. Its concurrency:
-- o:<domain>, s:<domain>, o:*, s:*, in that order; 0 = no limit.

local D = {}
local RANK_OFFSET = 2 ^ 50

local function dq_keys(first)
  D.dq, D.domains, D.state, D.conf = KEYS[first], KEYS[first + 1], KEYS[first + 2], KEYS[first + 3]
end

-- a queue score as 16 digits whose text order is the numeric order
local function dq_rank(score)
  local s = math.floor(tonumber(score) or 0)
  if s < -RANK_OFFSET then s = -RANK_OFFSET elseif s >= RANK_OFFSET then s = RANK_OFFSET - 1 end
  return string.format("%016.0f", s + RANK_OFFSET)
end

local function dq_first(domain, n)
  return redis.call("ZRANGEBYLEX", D.dq, "[" .. domain .. "\t", "[" .. domain .. "\t\255", "LIMIT", 0, n)
end

local function dq_parse_conf(value)
  if not value then return nil, nil end
  local d, c = string.match(value, "^(%S+) (%S+)$")
  return tonumber(d), tonumber(c)
end

local dq_limit_cache = {}
-- (delay ms, concurrency) in force for domain
local function dq_limits(domain)
  local hit = dq_limit_cache[domain]
  if hit then return hit[1], hit[2] end
  local v = redis.call("HMGET", D.conf, "o:" .. domain, "s:" .. domain, "o:*", "s:*", "r:" .. domain)
  local od, oc = dq_parse_conf(v[1])
  local sd, sc = dq_parse_conf(v[2])
  local gd, gc = dq_parse_conf(v[3])
  local hd, hc = dq_parse_conf(v[4])
  local rd = dq_parse_conf(v[5])
  local delay = od or sd
  if delay == nil then
    delay = gd or hd or 0
    if rd and rd > delay then delay = rd end
  end
  local conc = oc or sc or gc or hc or 0
  dq_limit_cache[domain] = {delay, conc}
  return delay, conc
end

-- put domain on the schedule if it has queued requests: at the time its
-- delay allows (never before now), or parked at +inf while it has no free slot
local function dq_wake(domain, now)
  local current = redis.call("ZSCORE", D.domains, domain)
  local delay, conc = dq_limits(domain)
  local state = redis.call("HMGET", D.state, "b:" .. domain, "l:" .. domain, "p:" .. domain)
  local busy = tonumber(state[1]) or 0
  if (conc > 0 and busy >= conc) or state[3] then
    if current and current ~= "inf" then redis.call("ZADD", D.domains, "+inf", domain) end
    return
  end
  if current and current ~= "inf" then return end
  if #dq_first(domain, 1) == 0 then
    if current then redis.call("ZREM", D.domains, domain) end
    return
  end
  local at = (tonumber(state[2]) or 0) + delay
  if at < now then at = now end
  redis.call("ZADD", D.domains, at, domain)
end

-- a request of domain goes (back) into the queue
local function dq_add(domain, score, id, now)
  redis.call("ZADD", D.dq, 0, domain .. "\t" .. dq_rank(score) .. id)
  dq_wake(domain, now)
end

-- a lease of domain ended (acked, released, reaped or dead-lettered)
local function dq_done(domain, now)
  local busy = (tonumber(redis.call("HGET", D.state, "b:" .. domain)) or 0) - 1
  if busy <= 0 then
    redis.call("HDEL", D.state, "b:" .. domain)
  else
    redis.call("HSET", D.state, "b:" .. domain, busy)
  end
  dq_wake(domain, now)
end

-- a lease of domain ended (acked, released, reaped or dead-lettered)
local function dq_end(domain, id, freed, now)
  if redis.call("HGET", D.state, "p:" .. domain) == id then
    redis.call("HDEL", D.state, "p:" .. domain) -- never sent: the domain need not wait for it
  end
  if freed == "f" then
    dq_wake(domain, now)
  else
    dq_done(domain, now)
  end
end

-- the node reports on a lease of domain: "s" its request was sent (the
-- delay counts from now), "r" its download ended (no longer in flight)
local function dq_event(leased, id, info, kind, now)
  local _, _, _, domain, freed = lease_info(info)
  if domain == "" then return end
  if kind == "s" then
    if redis.call("HGET", D.state, "p:" .. domain) == id then
      redis.call("HDEL", D.state, "p:" .. domain)
    end
    redis.call("HSET", D.state, "l:" .. domain, now)
    dq_wake(domain, now)
  elseif kind == "r" and freed ~= "f" then
    redis.call("HSET", leased, id, info .. "|f")
    dq_done(domain, now)
  end
end

-- back to the queue it came from
local function requeue(queue, id, score, domain, now)
  if domain ~= "" then
    dq_add(domain, score, id, now)
  else
    redis.call("ZADD", queue, tonumber(score) or 0, id)
  end
end

