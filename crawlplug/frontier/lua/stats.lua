-- stats.lua: write one node's Scrapy stats and fold them into the crawl-wide stats.
--
-- KEYS[1] crawlstats  hash  stat -> value over every node of the crawl
-- KEYS[2] node stats  hash  stat -> this node's value (node:<id>:stats)
-- KEYS[3] statnodes   zset  node id -> its last stats flush (ms, Redis clock)
-- KEYS[4] (optional) sitem:<minute>  hash  what the kind "hsum" added in that minute (the
--         site spiders' outcomes per minute: crawlplug.sites.minutes), kept a day; a key of
--         another type there is left alone and counts nothing (the stats are written)
-- ARGV[1] node id
-- ARGV[2] "1" if this node flushed before (its stats hash should exist), else "0"
-- then triples: kind, stat name, value. Kinds:
--   sum    number; crawl-wide value += (value - the node's previous value)
--   hsum   as sum, and the same difference added to KEYS[4]'s field named as the stat less
--          its "site/" (an integer difference only): counted in the minute the node named
--   max    number; crawl-wide value = the largest node value
--   min    number; crawl-wide value = the smallest
--   tmax   ISO-8601 UTC time; the latest (string order is time order)
--   tmin   ISO-8601 UTC time; the earliest
--   set    any text; crawl-wide value = the last one written
--   dsum   stat removed from the node (value ignored): take its share out of the crawl-wide sum
--   del    stat removed from the node (value ignored)
-- Returns the Redis time (ms), or -1 without writing anything when ARGV[2] is
-- "1" and the node's hash is gone (a Redis restarted without its data): the
-- caller then sends all of its stats again.
--
-- The node's hash holds absolute values and the crawl-wide sum moves by the
-- difference from them, so running the same call twice (a reply lost to a
-- network error, then a retry) counts nothing twice.
--
-- uses: guard leases   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local crawl, node, registry, minute = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local node_id, flushed_before = ARGV[1], ARGV[2]

do
  local refused = guard({{crawl, "hash"}, {node, "hash"}, {registry, "zset"}})
  if refused then return refused end
end
if minute then -- the minutes are a history beside the stats: one of another type is skipped, not the flush
  local t = redis.call("TYPE", minute)["ok"]
  if t ~= "hash" and t ~= "none" then minute = nil end
end

if flushed_before == "1" and redis.call("HLEN", node) == 0 then -- (a hash: none is empty; HLEN, not EXISTS: a command name fewer)
  return -1
end

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local now = redis_now_ms()
redis.call("ZADD", registry, now, node_id)

local function is_int(s)
  return s ~= nil and string.find(s, "^-?%d+$") ~= nil
end

-- add delta (new - old, both texts) to the crawl-wide field
local function add(field, new, old)
  local n, o = tonumber(new), tonumber(old) or 0
  local cur = redis.call("HGET", crawl, field)
  if cur and tonumber(cur) == nil then
    redis.call("HSET", crawl, field, new) -- another node stored text here: the number wins
  elseif is_int(new) and (old == nil or old == false or is_int(old)) and (not cur or is_int(cur)) then
    redis.call("HINCRBY", crawl, field, string.format("%d", n - o))
  else
    redis.call("HINCRBYFLOAT", crawl, field, string.format("%.17g", n - o))
  end
end

for i = 3, #ARGV, 3 do
  local kind, field, value = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if kind == "sum" or kind == "hsum" then
    local old = redis.call("HGET", node, field)
    if tonumber(old) == nil then old = nil end
    add(field, value, old)
    redis.call("HSET", node, field, value)
    if kind == "hsum" and minute and is_int(value) and (not old or is_int(old)) then
      local d = tonumber(value) - (tonumber(old) or 0)
      if d ~= 0 then redis.call("HINCRBY", minute, string.sub(field, 6), string.format("%d", d)) end
    end
  elseif kind == "dsum" or kind == "del" then
    local old = redis.call("HGET", node, field)
    if kind == "dsum" and tonumber(old) ~= nil then
      add(field, "0", old)
    end
    redis.call("HDEL", node, field)
  else
    redis.call("HSET", node, field, value)
    local cur = redis.call("HGET", crawl, field)
    local replace = not cur or kind == "set"
    if not replace then
      if kind == "max" or kind == "min" then
        local c, v = tonumber(cur), tonumber(value)
        replace = c == nil or (v ~= nil and ((kind == "max" and v > c) or (kind == "min" and v < c)))
      elseif kind == "tmax" then
        replace = value > cur
      elseif kind == "tmin" then
        replace = value < cur
      end
    end
    if replace then
      redis.call("HSET", crawl, field, value)
    end
  end
end
if minute then redis.call("PEXPIRE", minute, 86460000) end -- a day (and a minute) after its last count
return now
