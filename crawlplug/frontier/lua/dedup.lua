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

local function hash_prepare(param, seen, first)
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
  if mode == "hash" then return hash_add(dkey) end
  if mode == "bloom" then return bloom_add(dkey) end
  return 1
end

-- What the caller learns after its last dedup_add: mode "bloom", each filter's layer
-- count ("3,2,2"); mode "hash", the generation count (recording what the call added);
-- else "".
local function dedup_finish()
  if DD.mode == "bloom" then return bloom_counts() end
  if DD.mode == "hash" then return hash_finish(DD.seen) end
  return ""
end
