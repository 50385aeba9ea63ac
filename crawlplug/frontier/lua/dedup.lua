-- dedup.lua: one dedup mode's check-and-record of a fingerprint, shared by the script
-- that admits requests (admit.lua) and the one a dupefilter used on its own calls
-- (seen.lua); not a script of its own: the loader puts it in front of the scripts whose
-- header uses it. Modes: "set" (a set of fingerprints), "bf" (a native Bloom filter,
-- reserved on first use), "ttl" (a sorted set fingerprint -> expiry, Redis-clock ms),
-- "bloom" (bloom.lua's filter), "hash" (full fingerprints in small hashes kept in
-- Redis's compact encoding, by generations: crawlplug/frontier/dedup.py HashDedup).
-- Uses redis_now_ms (leases.lua) and bloom.lua.
local DD = {mode = "", seen = "", now = 0, default_ttl = 0}

-- Mode "hash". ``seen`` is the store's hash: "spec" (the bucketing, written by the
-- client, or else by the first call: a call made with another is answered {"STALE_SPEC",
-- spec}, having written nothing), "gens" (the generation count), "count:<g>"
-- (fingerprints added to generation g). Its parameter is "<G> <spec>;<strip>,<capacity>;..."
-- for generations 1..G,
-- oldest first: a fingerprint's field in generation g is the fingerprint without its
-- first <strip> bytes (which the bucket, the key, fixes); once generation G holds
-- <capacity> fingerprints the next call is told to use G + 1 generations. The bucket
-- keys are KEYS[first..]; a dedup argument is, per generation g = 1..G, two bytes
-- (big-endian) saying which of them (0 = KEYS[first]) holds the fingerprint's bucket
-- in generation g, then the fingerprint.
local DH = {gens = 0, spec = "", strips = {}, caps = {}, first = 0, count = 0, added = 0}

-- Mode "hash" by splitting buckets (a spec "split:<fill>:<level>", crawlplug/frontier/fphash.py):
-- the store's hash holds "level", "next" (the level's next bucket to split), "count"; bucket
-- b of level l is the hash ``fph:<l>:<b hex>``, b the top l bits of the fingerprint's first
-- four bytes, its field the fingerprint less its first floor(l / 8) bytes. A fingerprint
-- whose bucket at the level is below "next" is in its bucket of level + 1. The parameter is
-- "S <level> <next> <W> <spec>", as the caller last learnt them: KEYS[first..first+3W-1]
-- name W buckets from <next> on, each with its two halves of level + 1, which the call may
-- split; a dedup argument is two bytes (big-endian) naming the fingerprint's bucket at
-- <level> (0 = KEYS[first]), two naming its bucket at <level> + 1 (65535: not named),
-- then the fingerprint. A caller at another level is answered {"STALE", state}, having
-- written nothing; a fingerprint whose bucket it did not name ends the call (PARTIAL:
-- the caller sends the rest again). The state is "<level> <next> <splits due>".
local DS = {on = false, ready = false, fill = 0, level = 0, called = 0, next = 0, count = 0, added = 0,
            first = 0, win0 = 0, wins = 0, spec = "", stored = false, moved = false}
local MAX_LEVEL = 31

local function split_due()
  if DS.level >= MAX_LEVEL then return 0 end
  local due = math.ceil(DS.count / DS.fill) - (2 ^ DS.level + DS.next)
  return due > 0 and due or 0
end

local function split_state()
  return DS.level .. " " .. DS.next .. " " .. split_due()
end

-- the top ``bits`` bits of the fingerprint's first four bytes (the argument's bytes at..at+3)
local function top_bits(dkey, at, bits)
  if bits == 0 then return 0 end
  local a, b, c, d = string.byte(dkey, at, at + 3)
  return math.floor((((a * 256 + b) * 256 + c) * 256 + d) / 2 ^ (32 - bits))
end

local function hset_all(key, pairs)
  for i = 1, #pairs, 7000 do -- unpack's stack: at most a few thousand arguments a call
    redis.call("HSET", key, unpack(pairs, i, math.min(i + 6999, #pairs)))
  end
end

-- bucket ``parent`` of ``level`` into ``low`` and ``high`` of level + 1 by its fields' next
-- bit (bit ``level`` of the fingerprint: its field's first byte holds it)
local function split_bucket(parent, low, high, level)
  local mask, drop = 2 ^ (7 - level % 8), level % 8 == 7 -- a whole byte more fixed: dropped
  local halves = {{}, {}}
  for _, field in ipairs(redis.call("HKEYS", parent)) do
    local half = halves[math.floor(string.byte(field, 1) / mask) % 2 + 1]
    half[#half + 1] = drop and string.sub(field, 2) or field
    half[#half + 1] = ""
  end
  if #halves[1] > 0 then hset_all(low, halves[1]) end
  if #halves[2] > 0 then hset_all(high, halves[2]) end
  redis.call("DEL", parent)
end

-- where ``dkey``'s fingerprint is now: the index of its bucket in KEYS (nil: not named) and
-- the level of that bucket
local function split_home(dkey)
  local at = 1 -- its bucket at the caller's level, else at the next
  if DS.level > DS.called or top_bits(dkey, 5, DS.level) < DS.next then at = 3 end
  local hi, lo = string.byte(dkey, at, at + 1)
  if hi == 255 and lo == 255 then return nil, 0 end
  return DS.first + hi * 256 + lo, DS.called + (at == 3 and 1 or 0)
end

-- The reads of a splitting store's call, before its first write (no writes here): the
-- store's state (what guard_bloom_meta read), then each fingerprint looked up in its
-- bucket. That lookup (HEXISTS, sent with pcall) is the bucket's type check (guard.lua's
-- dedup_spec leaves these keys to it): a bucket of another type refuses the call having
-- written nothing. ``dkeys`` is a function giving the call's dedup arguments in turn.
-- Returns nil, or a reply: the caller's to call again ({"STALE", state}, {"STALE_SPEC",
-- spec}), or a refusal.
local HELD = {} -- dedup argument -> true when the store holds its fingerprint
local function split_ready(param, seen, first, dkeys)
  local level, nxt, wins, spec = string.match(param, "^S (%d+) (%d+) (%d+) (%S+)$")
  DS.on, DS.first, DS.spec, DS.added, DS.moved = true, first, spec, 0, false
  DS.called, DS.win0, DS.wins = tonumber(level), tonumber(nxt), tonumber(wins)
  DS.fill = tonumber(string.match(spec, "^split:(%d+):"))
  -- what guard_bloom_meta read of the store: {gens, spec, count, level, next}
  local read = GUARDED[seen]
  if type(read) ~= "table" then read = redis.call("HMGET", seen, "gens", "spec", "count", "level", "next") end
  if read[2] and read[2] ~= spec then return {"STALE_SPEC", read[2]} end
  DS.stored = read[4] and true or false -- (a missing field reads as false)
  DS.level = tonumber(read[4] or string.match(spec, ":(%d+)$"))
  DS.next, DS.count = tonumber(read[5] or "0"), tonumber(read[3] or "0")
  if DS.level ~= DS.called then return {"STALE", split_state()} end
  DS.ready = true
  for dkey in dkeys do
    if dkey ~= "" and HELD[dkey] == nil then
      local k, lvl = split_home(dkey)
      if k then
        local held, refused = checked_read("hash", "HEXISTS", KEYS[k], string.sub(dkey, 5 + math.floor(lvl / 8)))
        if refused then return refused end
        HELD[dkey] = held == 1
      end
    end
  end
  return nil
end

-- the splits due whose buckets the call names, before any fingerprint is recorded (the
-- store's state and lookups were read by split_ready, among the call's checks)
local function split_prepare(param, seen, first)
  if not DS.ready then
    local again = split_ready(param, seen, first, function() return nil end)
    if again then return again end
  end
  local size = 2 ^ DS.level
  while DS.level < MAX_LEVEL and DS.count > DS.fill * (size + DS.next) do
    local i = DS.next - DS.win0
    if i < 0 or i >= DS.wins then break end -- not named: the reply says they are due
    local k = first + 3 * i
    split_bucket(KEYS[k], KEYS[k + 1], KEYS[k + 2], DS.level)
    DS.next, DS.moved = DS.next + 1, true
    if DS.next == size then -- the level is split: the next one begins (its buckets are the halves)
      DS.level, DS.next = DS.level + 1, 0
      break
    end
  end
  return nil
end

-- 1 if new (and recorded), 0 if held; nil when its bucket was not named. Its lookup was
-- made by split_ready; one it could not make (its bucket not named then) is made here,
-- in a bucket this call's splits wrote (a half the guard checked), or not at all (nil).
local function split_add(dkey)
  local held = HELD[dkey]
  if held then return 0 end
  local k, level = split_home(dkey)
  if not k then return nil end
  local field = string.sub(dkey, 5 + math.floor(level / 8))
  if held == nil then
    if redis.call("HSETNX", KEYS[k], field, "") == 0 then
      HELD[dkey] = true
      return 0
    end
  else
    redis.call("HSET", KEYS[k], field, "")
  end
  HELD[dkey] = true -- the same fingerprint again in this call is held
  DS.added = DS.added + 1
  return 1
end

local function split_finish(seen)
  if DS.added > 0 then DS.count = redis.call("HINCRBY", seen, "count", DS.added) end
  if DS.moved or (DS.added > 0 and not DS.stored) then
    redis.call("HSET", seen, "spec", DS.spec, "level", DS.level, "next", DS.next)
  end
  DS.added, DS.moved, DS.stored = 0, false, true
  return split_state()
end

local function hash_prepare(param, seen, first)
  if string.sub(param, 1, 2) == "S " then return split_prepare(param, seen, first) end
  DS.on = false
  local g, spec, rest = string.match(param, "^(%d+) ([^;]+)(.*)$")
  DH.gens, DH.spec, DH.first, DH.added = tonumber(g), spec, first, 0
  local n = 0
  for strip, cap in string.gmatch(rest, ";(%d+),(%d+)") do
    n = n + 1
    DH.strips[n], DH.caps[n] = tonumber(strip), tonumber(cap)
  end
  -- what guard_bloom_meta read of the store (its check, before any write), else read now
  local read = GUARDED[seen]
  local stored = type(read) == "table" and read or redis.call("HMGET", seen, "gens", "spec")
  -- a node bucketing by another spec (another CRAWLPLUG_DEDUP_CAPACITY, one bound before a
  -- new run or a roll) would look each fingerprint up in the wrong bucket: it learns the
  -- crawl's and calls again, as with another generation count
  if stored[2] and stored[2] ~= spec then return {"STALE_SPEC", stored[2]} end
  local held = tonumber(stored[1] or "1")
  if held ~= DH.gens or n ~= DH.gens then return {"STALE", tostring(held)} end
  if type(read) == "table" and (read[1] or "1") == tostring(DH.gens) then
    DH.count = tonumber(read[3] or "0") -- the same field count:<gens>, as guard_bloom_meta read it
  else
    DH.count = tonumber(redis.call("HGET", seen, "count:" .. DH.gens) or "0")
  end
  return nil
end

-- 1 if new (and recorded in the newest generation), 0 if any generation holds it
local function hash_add(dkey)
  local gens = DH.gens
  local at = 2 * gens + 1 -- where the fingerprint starts
  for g = 1, gens do
    local hi, lo = string.byte(dkey, 2 * g - 1, 2 * g)
    local bucket, field = KEYS[DH.first + hi * 256 + lo], string.sub(dkey, at + DH.strips[g])
    if g < gens then
      if redis.call("HEXISTS", bucket, field) == 1 then return 0 end
    elseif redis.call("HSETNX", bucket, field, "") == 0 then
      return 0
    end
  end
  DH.added = DH.added + 1
  return 1
end

-- after the last fingerprint of a call: the newest generation's count, and a new
-- generation once it holds its capacity; returns the generation count
local function hash_finish(seen)
  if DH.added > 0 then
    if DH.count == 0 then
      redis.call("HSETNX", seen, "gens", DH.gens)
      redis.call("HSETNX", seen, "spec", DH.spec) -- what the buckets mean (export needs it)
    end
    DH.count = redis.call("HINCRBY", seen, "count:" .. DH.gens, DH.added)
    DH.added = 0
    if DH.count >= DH.caps[DH.gens] then
      DH.gens = DH.gens + 1
      redis.call("HSET", seen, "gens", DH.gens)
    end
  end
  return tostring(DH.gens)
end

-- The reads a dedup mode makes among a call's checks, before its first write: mode "hash"
-- splitting looks each fingerprint up (split_ready); other modes none. ``dkeys``: a
-- function giving the call's dedup arguments in turn. Returns nil, or the reply to return
-- (a refusal, or the caller's to call again), having written nothing.
local function dedup_check(mode, param, seen, first_extra, dkeys)
  if mode == "hash" and string.sub(param, 1, 2) == "S " then
    return split_ready(param, seen, first_extra, dkeys)
  end
  return nil
end

-- Get ready to check fingerprints of ``mode`` in key ``seen`` (``param``: the mode's
-- parameter; ``first_bloom_key``: where the Bloom filter's keys, or mode "hash"'s bucket
-- keys, start in KEYS). Returns nil, or the reply telling the caller to call again
-- (bloom_setup's, or mode "hash"'s {"STALE", generations}), having written nothing.
local function dedup_prepare(mode, param, seen, first_bloom_key)
  DD.mode, DD.seen = mode, seen
  if mode == "bloom" then
    local again = bloom_setup(param, first_bloom_key)
    if again then return again end
    bloom_start()
  elseif mode == "bf" then
    if redis.call("EXISTS", seen) == 0 then
      local err, cap = string.match(param, "^(%S+) (%d+)$")
      redis.call("BF.RESERVE", seen, err, cap, "EXPANSION", 2)
    end
  elseif mode == "ttl" then
    DD.now = redis_now_ms()
    DD.default_ttl = tonumber(param)
    -- forget what expired; each fingerprint is removed once, so this is amortised O(log n)
    redis.call("ZREMRANGEBYSCORE", seen, "-inf", DD.now)
  elseif mode == "hash" then
    return hash_prepare(param, seen, first_bloom_key)
  end
  return nil
end

-- Check and record one dedup argument: 1 if new, 0 if seen before, nil when the Bloom
-- filter needs a layer whose keys the caller was not given. A "ttl" argument is
-- "<ttl ms or empty>:<fingerprint>"; a "hash" argument, the bucket indexes then the
-- fingerprint (above).
local function dedup_add(dkey)
  local mode, seen = DD.mode, DD.seen
  if mode == "set" then return redis.call("SADD", seen, dkey) end
  if mode == "bf" then return redis.call("BF.ADD", seen, dkey) end
  if mode == "ttl" then
    local sep = string.find(dkey, ":", 1, true)
    local ttl = tonumber(string.sub(dkey, 1, sep - 1)) or DD.default_ttl
    local fp = string.sub(dkey, sep + 1)
    if tonumber(redis.call("ZSCORE", seen, fp) or "0") > DD.now then return 0 end
    redis.call("ZADD", seen, DD.now + ttl, fp)
    return 1
  end
  if mode == "hash" then
    if DS.on then return split_add(dkey) end
    return hash_add(dkey)
  end
  if mode == "bloom" then return bloom_add(dkey) end
  return 1
end

-- What the caller learns after its last dedup_add: mode "bloom", each filter's layer
-- count ("3,2,2"); mode "hash", the generation count (recording what the call added);
-- else "".
local function dedup_finish()
  if DD.mode == "bloom" then return bloom_counts() end
  if DD.mode == "hash" then
    if DS.on then return split_finish(DD.seen) end
    return hash_finish(DD.seen)
  end
  return ""
end
