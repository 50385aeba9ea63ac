-- epoch.lua: the guard of every script a node sends (not a script of its own:
-- the loader puts it in front of admit, pop, heartbeat, renew, release, dead
-- and starts).
--
-- A crawl's epoch is a random token, kept in the `epoch` key of each of its
-- parts (the crawl's own keys and each shard's; "0" while the key is absent:
-- no node holds that). It is new when a run begins or the crawl is reset (crawlplug purge,
-- CRAWLPLUG_FLUSH_ON_START, crawlplug import): see crawlplug/runs.py. A node
-- passes, as the LAST of its KEYS, the part's epoch key and, as the LAST of
-- its ARGV, the epoch it joined; "" checks nothing (operator tools and tests
-- that drive a frontier directly). A call from another epoch writes nothing
-- and fails with "STALE_EPOCH <stored> <given>", so acks, admissions and
-- leases of a crawl's old state never touch the new one. An epoch key of the
-- wrong type is refused as a corrupt key (guard.lua's refused_kind, pasted
-- in front of this).

local NARGV = #ARGV - 1 -- the script's own arguments: the epoch comes last

local function epoch_guard()
  local given = ARGV[#ARGV]
  if given == "" then return nil end
  -- a key of another type (written by hand) is a corrupt key, refused as guard.lua does,
  -- not a Lua error that names nothing; the GET that fails on it is the check
  local stored = redis.pcall("GET", KEYS[#KEYS])
  if type(stored) == "table" then return refused_kind(KEYS[#KEYS], "string") end
  stored = stored or "0"
  if stored ~= given then
    return redis.error_reply("STALE_EPOCH " .. stored .. " " .. given ..
      ": the crawl was reset or began a new run since this node joined; nothing was written")
  end
  return nil
end
