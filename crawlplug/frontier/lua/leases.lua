-- leases.lua: what a lease record says, and time by Redis's clock; not a script of
-- its own: the loader puts it in front of the scripts whose header uses it.
--
-- A lease record (the `leased` hash) is "node|score|deliveries" for the plain
-- queues, "node|score|deliveries|domain" for the per-domain queue, plus "|f" once
-- its download ended (it no longer counts as in flight); score "start" marks a
-- start entry's lease. crawlplug/frontier/store.py reads the same format.

-- "node|score|deliveries" (plain queues) or "node|score|deliveries|domain",
-- plus "|f" once its download ended (it no longer counts as in flight)
local function lease_info(info)
  local node, score, d, domain, freed = string.match(info or "", "^([^|]*)|([^|]*)|(%d+)|?([^|]*)|?(f?)$")
  return node, score, d, domain or "", freed or ""
end

-- start entries back at the head of start_urls, keeping their order
local function push_back_starts(starts, entries)
  if #entries == 0 then return end
  local reversed = {}
  for j = #entries, 1, -1 do reversed[#reversed + 1] = entries[j] end
  redis.call("LPUSH", starts, unpack(reversed))
end

-- A start entry's lease record has the score "start" (taken from start_urls, or from a
-- scrapy-redis key) or "start:<lane>" (from the crawl's lane start_urls:<lane>,
-- CRAWLPLUG_START_KEYS): an entry given back returns to the list it came from.
local function is_start(score)
  return score ~= nil and string.sub(score, 1, 5) == "start"
end

-- start entries given back ({lane or false, entry} in order), each at the head of the list it
-- came from: start_urls (``default``), or its lane's key among KEYS[first..last] (the lanes
-- the caller reads); an entry of a lane not passed goes back to start_urls
local function push_back_to_lanes(default, first, last, entries)
  local key_of = {}
  for k = first, last do
    local lane = string.match(KEYS[k], ":start_urls:([^:]+)$")
    if lane then key_of[lane] = KEYS[k] end
  end
  local groups, order = {}, {}
  for _, e in ipairs(entries) do
    local key = (e[1] and key_of[e[1]]) or default
    if not groups[key] then
      groups[key] = {}
      order[#order + 1] = key
    end
    groups[key][#groups[key] + 1] = e[2]
  end
  for _, key in ipairs(order) do push_back_starts(key, groups[key]) end
end

local function redis_now_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The one live-node rule: a node (or a producer) is live while its deadline in the nodes
-- (producers) zset is later than now; at or before now it is dead, and reap.lua removes
-- it. crawlplug/crawl/nodes.py is the same rule for Python readers.
local function live_count(zset, now)
  return redis.call("ZCOUNT", zset, "(" .. now, "+inf")
end

local function is_live(zset, member, now)
  local deadline = redis.call("ZSCORE", zset, member)
  return deadline ~= false and deadline ~= nil and tonumber(deadline) > now
end

-- The lowest request id a script may hand out now: Redis's clock in ms times 1000. Ids
-- come from seq (admit.lua, starts.lua), but never below this: after Redis went back in
-- time (a restart from a snapshot, a failover to a replica that lagged) seq holds an older
-- value, and ids it handed out since would be handed out again, to other requests, while
-- a node still holds them as leases (its ack or release would then end another request).
-- The clock went on, so the ids it gives are above every id handed out before (unless
-- more than 1000 a ms were taken: seq runs ahead then, by as much). Ids still increase, so
-- requests of one priority keep their FIFO order; 16 digits hold it until the year 2286.
-- A failover to a machine whose clock is behind by more than the failover takes can give
-- an id again: the rollback guard (record.lua) still refuses the acks that would misuse it.
-- pcall(redis.replicate_commands) must have been called first (TIME before writes).
local function id_floor()
  return redis_now_ms() * 1000
end

-- the lease records renew_leases needs (ARGV[from..upto] in leased), read before the
-- script's first write as the check of leased (guard.lua's checked_hmget): the records, or
-- nil and the refusal of a leased of the wrong type; {} with no ids (leased then needs
-- guard()'s check)
local function renew_read(leased, from, upto)
  if upto < from then return {} end
  local infos = checked_hmget(leased, ARGV, from, upto)
  if not infos then return nil, refused_kind(leased, "hash") end
  return infos
end

-- renew this node's leases named by ARGV[from..upto] to now + lease_ms, and append to out
-- the ids it no longer holds (reaped after it stalled, or leased to another node since):
-- one ZADD for all of them (guard.lua's variadic), from their records ``infos`` (renew_read's)
local function renew_leases(leases, infos, node, now, lease_ms, from, upto, out)
  if upto < from then return out end
  local prefix = node .. "|"
  local until_s = string.format("%d", now + lease_ms) -- formatted once, not once a lease
  local renewed = {}
  for j = from, upto do
    local info = infos[j - from + 1]
    if info and string.sub(info, 1, #prefix) == prefix then
      renewed[#renewed + 1] = until_s
      renewed[#renewed + 1] = ARGV[j]
    else
      out[#out + 1] = ARGV[j]
    end
  end
  for at = 1, #renewed, BATCH do
    redis.call("ZADD", leases, "XX", unpack(renewed, at, math.min(at + BATCH - 1, #renewed)))
  end
  return out
end
