-- forget.lua: remove request fingerprints from one part of a crawl's exact dedup
-- state, so that those requests are admitted (crawled) again; `crawlplug forget`.
-- A Bloom filter cannot forget one URL (its bits are shared by many): if this part
-- holds one, nothing is removed and the reply says so (crawlplug/frontier/forgetting.py).
--
-- KEYS[1] seen       set   raw 20-byte fingerprints (RedisSetDupeFilter)
-- KEYS[2] seen_ttl   zset  fingerprint -> expiry ms (ExpiringDupeFilter)
-- KEYS[3] bloom      hash  the Lua Bloom filter's sizing (RedisBloomDupeFilter)
-- KEYS[4] bf         the server's own Bloom filter (CRAWLPLUG_BLOOM_NATIVE)
-- ARGV[1..] raw fingerprints
-- Returns {flags}: one char per fingerprint, "1" removed (from the set, the expiring
-- set or both), "0" in neither; or {"BLOOM", "<bloom|bf>"}, having removed nothing.
--
-- uses: guard   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local seen, seen_ttl, bloom, bf = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- ---- all or nothing (guard.lua): every key checked before the first write ----
do
  local refused = guard({{seen, "set"}, {seen_ttl, "zset"}, {bloom, "hash"}, {bf, "any"}})
  if refused then return refused end
end
if redis.call("EXISTS", bloom) == 1 then return {"BLOOM", "bloom"} end
if redis.call("EXISTS", bf) == 1 then return {"BLOOM", "bf"} end
-- ---- end of the checks ----

local flags = {}
for i = 1, #ARGV do
  local removed = redis.call("SREM", seen, ARGV[i]) + redis.call("ZREM", seen_ttl, ARGV[i])
  flags[i] = removed > 0 and "1" or "0"
end
return {table.concat(flags)}
