-- guard.lua: the all-or-nothing check every script makes before its first write.
-- Not a script of its own: the loader puts it in front of every script.
--
-- A script is not rolled back when a command in it fails: a crawl key of the
-- wrong type, or a counter that holds no integer (both written by hand), would
-- fail a command half-way, after earlier writes (a fingerprint recorded, its
-- request not stored). So each script first checks every key it was given, the
-- type of each and the values its commands need to be integers, and refuses the
-- whole call, having written nothing, with an error naming the key:
--   CORRUPT crawl key <key> holds a set, not a list: nothing was done (repair or delete the key)
-- crawlplug.errors.CorruptKey is that error on the Python side.
--
-- guard(spec) takes a list of {key, kind[, fields]}, kind one of "set", "zset",
-- "hash", "list", "string" (a key may also be absent), "int" (absent, or a
-- string holding an integer), "counters" (a hash whose fields listed in
-- COUNTERS hold integers), "any" (not checked). It returns nil, or the error
-- reply to return. A key is checked once per call (GUARDED), whoever asks again.
--
-- What a check costs counts: the crawl's hot scripts (admit, pop) run it on every call,
-- and every command a script sends costs about a microsecond of conversions whatever it
-- does. So a check is one cheap command (CHEAP_CHECK), and a read a script needs anyway
-- before its first write may be the check itself (epoch.lua's GET, checked_hmget,
-- checked_read, guard_bloom_meta's reads of the dedup state): that read is sent with
-- redis.pcall, and a key of the wrong type is refused with the same error as the typed
-- check's (refused_kind), never left to fail as a bare WRONGTYPE that names no key. Only
-- a read that runs on every path of the script before its first write may stand for the
-- check: a key whose first access is a write, a read after a write or a read on some
-- paths only keeps its typed check (a failed command does not undo earlier writes). A
-- read made first sets GUARDED[key], and guard() then skips the key.

--: the counters of the stats hash that scripts increment (HINCRBY)
local COUNTERS = {"enqueued", "filtered", "acked", "start_acked", "stale_acks", "leased", "redelivered",
                  "orphan_ids", "reaped", "dead", "start_returned", "released", "start_taken"}

local function corrupt_reply(key, what)
  return redis.error_reply("CORRUPT crawl key " .. key .. " " .. what ..
    ": nothing was done (repair or delete the key; see docs/faults.md)")
end

local function is_integer(value)
  return type(value) == "string" and #value <= 18 and string.match(value, "^%-?%d+$") ~= nil
end

local function shown(value)
  return string.format("%q", string.sub(value, 1, 40))
end

-- the check of one kind costs one command whose reply is a number (a typed length, which
-- fails with WRONGTYPE on a key of another type): about a quarter of what TYPE costs
-- inside a script, whose status reply Lua builds as a table. TYPE is asked only to name
-- what a refused key holds, and for kinds with no such command (a native Bloom filter).
-- (a string's is STRLEN, never GET: a Bloom filter's layers are strings of megabytes, which a GET
-- would copy into Lua at every call: measured, 1.5x Redis's CPU a page with Bloom dedup)
local CHEAP_CHECK = {set = "SCARD", zset = "ZCARD", hash = "HLEN", list = "LLEN", string = "STRLEN"}

-- what guard() read for "int" and "counters" items (key -> the GET's value, or the
-- HMGET's values in COUNTERS order), so a script can use them without asking again
local GUARDED = {}

local function refused_kind(key, want)
  return corrupt_reply(key, "holds a " .. redis.call("TYPE", key)["ok"] .. ", not a " .. want)
end

-- redis.call(cmd, key, ...) when the key holds what a command of ``kind`` reads ("hash",
-- "zset", ...): its reply, and the key guarded; else nil and the refusal of the key (as
-- guard() refuses it). For a read a script needs before its first write, on every path:
-- it is then the key's check (the header above).
local function checked_read(kind, cmd, key, ...)
  local out = redis.pcall(cmd, key, ...)
  if type(out) == "table" and out.err then return nil, refused_kind(key, kind) end
  GUARDED[key] = GUARDED[key] or true
  return out
end

local function guard(spec)
  for _, item in ipairs(spec) do
    local key, kind = item[1], item[2]
    -- item.read: the key's first access is a read guard_bloom_meta makes (its check)
    if kind ~= "any" and not item.read and GUARDED[key] == nil then
      if kind == "int" then
        local value = redis.pcall("GET", key)
        if type(value) == "table" then return refused_kind(key, "string") end
        if value and not is_integer(value) then return corrupt_reply(key, "holds " .. shown(value) .. ", not an integer") end
        GUARDED[key] = value
      elseif kind == "counters" then
        local values = redis.pcall("HMGET", key, unpack(COUNTERS))
        if values.err then return refused_kind(key, "hash") end
        for i = 1, #COUNTERS do
          local value = values[i]
          if value and not is_integer(value) then
            return corrupt_reply(key, "field " .. COUNTERS[i] .. " holds " .. shown(value) .. ", not an integer")
          end
        end
        GUARDED[key] = values
      elseif CHEAP_CHECK[kind] then
        local n = redis.pcall(CHEAP_CHECK[kind], key)
        if type(n) == "table" then return refused_kind(key, kind) end
        GUARDED[key] = true
      else
        local held = redis.call("TYPE", key)["ok"]
        if held ~= "none" and held ~= kind then
          return corrupt_reply(key, "holds a " .. held .. ", not a " .. kind)
        end
        GUARDED[key] = true
      end
    end
  end
  return nil
end

-- the dedup keys of an admission: KEYS[seen_index] and, for mode "bloom", each
-- filter's hash of layer counts and its bit strings from KEYS[first_extra] on
-- (the layout of admit.lua's ARGV[3]); for mode "hash", the store's hash and the
-- bucket hashes KEYS[first_extra..last_extra] (none when last_extra is nil); appended to spec
local function dedup_spec(spec, mode, seen, param, first_extra, last_extra)
  if mode == "hash" then
    spec[#spec + 1] = {seen, "hash", store = true, read = true}
    -- splitting ("S <level> <next> <W> ..."): the W buckets to split and their halves are
    -- checked here; a fingerprint's bucket by its lookup (dedup.lua split_ready, a read
    -- among the checks). By generations every bucket is checked here.
    local window = string.match(param, "^S %d+ %d+ (%d+) ")
    local typed = window and first_extra + 3 * tonumber(window) - 1 or last_extra or 0
    for key = first_extra, last_extra or 0 do spec[#spec + 1] = {KEYS[key], "hash", read = key > typed} end
  elseif mode == "set" then
    spec[#spec + 1] = {seen, "set"}
  elseif mode == "ttl" then
    spec[#spec + 1] = {seen, "zset"}
  elseif mode == "bf" then
    spec[#spec + 1] = {seen, "MBbloom--"}
  elseif mode == "bloom" then
    spec[#spec + 1] = {seen, "hash"}
    local key, first_line = first_extra, true
    for line in string.gmatch(param, "[^\n]+") do
      if first_line then
        first_line = false
      else
        spec[#spec + 1] = {KEYS[key], "hash", meta = true, read = true}
        key = key + 1
        for _, _, _, chunks in string.gmatch(line, "(%d+),(%d+),(%d+),(%d+),(%d+)") do
          for _ = 1, tonumber(chunks) do
            spec[#spec + 1] = {KEYS[key], "string"}
            key = key + 1
          end
        end
      end
    end
  end
  return spec
end

-- a Bloom filter's layer counts ("layers", "count:<n>"), and mode "hash"'s generation
-- count and its newest generation's count ("gens", "count:<gens>"), or, splitting, its
-- "count", "level" and "next", must be integers.
-- These reads are the first access of those hashes on every path, before any write (the
-- items' ``read``: guard() makes no typed check of them), so they are their type check
-- too. What they read is kept in GUARDED[key] ({gens, spec, count, level, next} for the store,
-- {layers, count} for a filter's hash) for dedup.lua and bloom.lua, which would read it
-- again otherwise.
local function guard_bloom_meta(spec)
  for _, item in ipairs(spec) do
    local key = item[1]
    if item.store and type(GUARDED[key]) ~= "table" then
      local stored, refused = checked_read("hash", "HMGET", key, "gens", "spec", "count", "level", "next")
      if refused then return refused end
      for i, field in ipairs({"gens", "spec", "count", "level", "next"}) do
        if i ~= 2 and stored[i] and not is_integer(stored[i]) then
          return corrupt_reply(key, "field " .. field .. " holds " .. shown(stored[i]) .. ", not an integer")
        end
      end
      local count = stored[3] -- a splitting store's; by generations, its newest generation's
      if not (stored[2] and string.sub(stored[2], 1, 6) == "split:") then
        local gens = stored[1] or "1"
        count = redis.call("HGET", key, "count:" .. gens)
        if count and not is_integer(count) then
          return corrupt_reply(key, "field count:" .. gens .. " holds " .. shown(count) .. ", not an integer")
        end
      end
      GUARDED[key] = {stored[1], stored[2], count, stored[4], stored[5]}
    end
    if item.meta and type(GUARDED[key]) ~= "table" then
      local layers, refused = checked_read("hash", "HGET", key, "layers")
      if refused then return refused end
      if layers and not is_integer(layers) then
        return corrupt_reply(key, "field layers holds " .. shown(layers) .. ", not an integer")
      end
      local count
      if layers then
        count = redis.call("HGET", key, "count:" .. layers)
        if count and not is_integer(count) then
          return corrupt_reply(key, "field count:" .. layers .. " holds " .. shown(count) .. ", not an integer")
        end
      end
      GUARDED[key] = {layers, count}
    end
  end
  return nil
end

-- Redis < 7 refuses, when over maxmemory, a script's first write that may use
-- memory, and lets every later write through (it cannot stop a script half-way);
-- Redis 7 does the same for scripts without flags. A script that must go through
-- on a full Redis (lease renewal) makes this write first: it frees memory and so
-- is never refused. On Redis 7 those scripts also declare flags=allow-oom (lua/__init__.py).
local function first_write_allowed_when_full(key)
  redis.call("HDEL", key, "\0")
end

-- a statistic-only key (the per-10 s series, the graveyard, a node's metrics) of the wrong
-- type is deleted, not refused: it holds nothing a request needs, and refusing would stop
-- the crawl (admissions, renewals, reaping) for a number on a dashboard. A write: call it
-- after the checks, where the script writes anyway.
local function reset_statistic(key)
  local held = redis.call("TYPE", key)["ok"]
  if held ~= "hash" and held ~= "none" then redis.call("DEL", key) end
end

-- the start entries waiting in a start_urls key: its length if it is a list (or absent),
-- else 0. A start_urls of the wrong type (a set, from scrapy-redis's habit) is not read
-- (starts.lua refuses it, idle.lua reports it): scripts that count work do not count it,
-- rather than fail on it, so it never keeps a crawl from starting or finishing.
local function start_entries(key)
  if redis.call("TYPE", key)["ok"] ~= "list" then return 0 end
  return redis.call("LLEN", key)
end

-- start_entries over KEYS[first..last] (the crawl's lanes start_urls:<lane> a caller reads)
local function lane_entries(first, last)
  local n = 0
  for k = first, last do n = n + start_entries(KEYS[k]) end
  return n
end

-- the next free request id: INCR seq from ``floor`` at least (leases.lua's id_floor), skipping
-- ids still in use (seq deleted by hand, or rolled back, must not make a new request
-- overwrite a stored one)
local function next_id(seq, requests, floor)
  if (tonumber(redis.call("GET", seq) or "0") or 0) < floor then
    redis.call("SET", seq, string.format("%d", floor))
  end
  local id
  repeat
    id = string.format("%016d", redis.call("INCR", seq))
  until redis.call("HEXISTS", requests, id) == 0
  return id
end

-- add n to a hash field that is only a statistic (per-10 s series, per-domain
-- counts): a value that is not a number (written by hand) starts again from 0
-- instead of failing the script half-way
local function add_to_field(key, field, n)
  local value = tonumber(redis.call("HGET", key, field)) or 0
  redis.call("HSET", key, field, value + n)
  return value + n
end

-- Batched commands: one command for many fields or members costs one conversion of its
-- reply and one lookup, where one command each costs that many (a command from Lua costs
-- about a microsecond whatever its size). Sent in chunks, as Lua's unpack() takes a few
-- thousand values at most.
local BATCH = 1000

-- cmd key values... for values[first..last] (all of it by default): field/value or
-- score/member pairs for HSET and ZADD, members or fields for ZREM and HDEL; nothing
-- for an empty range
local function variadic(cmd, key, values, first, last)
  first, last = first or 1, last or #values
  for from = first, last, BATCH do
    redis.call(cmd, key, unpack(values, from, math.min(from + BATCH - 1, last)))
  end
end

-- HMGET key fields[first..last] (all of it by default): the values in the fields' order
-- (false for a field not set); with protected, nil when key is not a hash (the read is
-- then its type check: see checked_hmget)
local function hmget(key, fields, first, last, protected)
  first, last = first or 1, last or #fields
  local call = protected and redis.pcall or redis.call
  if last - first < BATCH then
    local out = call("HMGET", key, unpack(fields, first, last))
    if out.err then return nil end
    return out
  end
  local out = {}
  for from = first, last, BATCH do
    local part = call("HMGET", key, unpack(fields, from, math.min(from + BATCH - 1, last)))
    if part.err then return nil end
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

-- hmget's values, or nil when key is not a hash (the read is then its type check)
local function checked_hmget(key, fields, first, last)
  local out = hmget(key, fields, first, last, true)
  if out then GUARDED[key] = GUARDED[key] or true end
  return out
end

-- the per-10 s series (a statistic: of the wrong type it is started again): acked and
-- admitted added to bucket's "a:" and "e:" fields, and the span the crawl has been busy
-- ("busy_from", "busy_to", ms; an idle minute starts a new one): one read, one write
local function add_to_series(series, bucket, acked, admitted, now)
  local cur = redis.pcall("HMGET", series, "a:" .. bucket, "e:" .. bucket, "busy_to")
  if cur.err then
    redis.call("DEL", series)
    cur = {}
  end
  local fields = {}
  if acked > 0 then
    fields[#fields + 1] = "a:" .. bucket
    fields[#fields + 1] = (tonumber(cur[1]) or 0) + acked
  end
  if admitted > 0 then
    fields[#fields + 1] = "e:" .. bucket
    fields[#fields + 1] = (tonumber(cur[2]) or 0) + admitted
  end
  local busy_to = tonumber(cur[3] or "")
  if not busy_to or now - busy_to > 60000 then
    fields[#fields + 1] = "busy_from"
    fields[#fields + 1] = now
  end
  fields[#fields + 1] = "busy_to"
  fields[#fields + 1] = now
  redis.call("HSET", series, unpack(fields))
end
