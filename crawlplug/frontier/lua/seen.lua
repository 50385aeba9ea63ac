-- seen.lua: record request fingerprints in a crawl's dedup state, each one checked
-- and set in the same step, storing no request: a crawlplug dupefilter used on its
-- own, under Scrapy's scheduler or any other that keeps its requests elsewhere
-- (crawlplug/dupefilters.py). The state and its formats are admit.lua's: a
-- fingerprint recorded here is a duplicate for admit.lua, and back, so nodes with
-- crawlplug's Scheduler and nodes without it agree on one crawl.
--
-- KEYS[1] seen        the dedup state, as admit.lua's KEYS[1]: set (mode "set"),
--                     zset fingerprint -> expiry ms ("ttl"), the Bloom filter's
--                     spec hash ("bloom"), a native Bloom filter ("bf")
-- KEYS[2..]           mode "bloom" only, per filter (newest generation first): its
--                     hash of layer counts, then the bit strings of every layer the
--                     caller knows (plus one spare layer for the current filter),
--                     as admit.lua's KEYS[16..]; mode "hash": the bucket hashes of
--                     the fingerprints passed, each once
--                     (the compact store's hash of generations is KEYS[1])
-- ARGV[1] dedup mode: "set", "hash", "ttl", "bloom" or "bf"
-- ARGV[2] mode parameter, as admit.lua's ARGV[3]
-- ARGV[3..] one dedup key per request, as admit.lua's: the raw fingerprint
--         ("set", "bf"), "<ttl ms>:<raw fingerprint>" ("ttl", ttl "" = the
--         default), "<h1>,<h2>,<h3>" ("bloom"), bucket indexes then the raw
--         fingerprint ("hash", as admit.lua's)
-- Returns {flags, 0, 0, state}, admit.lua's shape: flags has one char per dedup
-- key, "1" new (and now recorded), "0" seen before; state is, for mode "bloom",
-- the layer count of each filter passed. Mode "bloom" may instead answer, as
-- admit.lua does: {"STALE", state} or {"STALE_GEN", generation}, having changed
-- nothing (call again knowing that), or {"PARTIAL", flags, state} when the filter
-- needed a second new layer in this call: the keys flags covers are recorded, call
-- again with the rest and the new layer's keys.
--
-- No epoch: a dupefilter used on its own joins no run (crawlplug/crawl/runs.py);
-- its fingerprints live as long as the crawl's dedup state does.
--
-- uses: guard leases bloom dedup   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local seen, mode, param = KEYS[1], ARGV[1], ARGV[2]
local first = 3 -- ARGV[first..]: the dedup keys

-- ---- all or nothing (guard.lua): every key checked before the first write ----
do
  local spec = dedup_spec({}, mode, seen, param, 2, #KEYS)
  local refused = guard(spec) or guard_bloom_meta(spec)
  if refused then return refused end
  local j = first - 1
  refused = dedup_check(mode, param, seen, 2, function() -- dedup.lua: the lookups made here
    j = j + 1
    return ARGV[j]
  end)
  if refused then return refused end
end
-- ---- end of the checks ----
pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)

if mode ~= "set" and mode ~= "hash" and mode ~= "bf" and mode ~= "ttl" and mode ~= "bloom" then
  return redis.error_reply("seen.lua: unknown dedup mode " .. tostring(mode))
end
do -- the dedup mode's state, as admit.lua gets it ready (dedup.lua; Bloom keys from KEYS[2])
  local again = dedup_prepare(mode, param, seen, 2)
  if again then return again end
end

local flags = {}
for i = first, #ARGV do
  local dkey = ARGV[i]
  local new = dedup_add(dkey)
  if new == nil then -- a Bloom layer or a bucket whose keys we were not given (dedup.lua)
    return {"PARTIAL", table.concat(flags), dedup_finish()}
  end
  flags[#flags + 1] = tostring(new)
end
local state = dedup_finish()
return {table.concat(flags), 0, 0, state}
