-- dedup.lua: one dedup mode's check-and-record of a fingerprint, shared by the script
-- that admits requests (admit.lua) and the one a dupefilter used on its own calls
-- (seen.lua); not a script of its own: the loader puts it in front of the scripts whose
-- header uses it. Modes: "set" (a set of fingerprints), "bf" (a native Bloom filter,
-- reserved on first use), "ttl" (a sorted set fingerprint -> expiry, Redis-clock ms),
-- "bloom" (bloom.lua's filter). Uses redis_now_ms (leases.lua) and bloom.lua.
local DD = {mode = "", seen = "", now = 0, default_ttl = 0}

-- Get ready to check fingerprints of ``mode`` in key ``seen`` (``param``: the mode's
-- parameter; ``first_bloom_key``: where the Bloom filter's keys start in KEYS). Returns
-- nil, or bloom_setup's reply telling the caller to call again.
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
  end
  return nil
end

-- Check and record one dedup argument: 1 if new, 0 if seen before, nil when the Bloom
-- filter needs a layer whose keys the caller was not given. A "ttl" argument is
-- "<ttl ms or empty>:<fingerprint>".
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
  if mode == "bloom" then return bloom_add(dkey) end
  return 1
end
