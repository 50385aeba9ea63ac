-- runclear.lua: the clearing of one part of a crawl (its own keys, or a shard's) by the
-- node beginning a run, fenced by the run it belongs to (crawlplug/crawl/runs.py begin).
--
-- join.lua hands the node that begins a run a fencing token: the run hash's "fence", one
-- more at each beginning and at each takeover of a stalled one. Before it clears a part,
-- the node claims the part with its token (KEYS[1] runfence, the highest token that
-- claimed the part); a part claimed with a higher token refuses every later step of a
-- lower one. So a node that stalled past its grace while beginning (another node took the
-- beginning over, and may since have begun crawling the run) clears nothing when it wakes:
-- it learns "lost" and joins again.
--
-- KEYS[1] runfence  str  the highest fencing token that claimed this part
-- then, by action (ARGV[2]):
--   "claim":  KEYS[2] the part's epoch key (set to ARGV[3] if ARGV[3] is not "")
--   "unlink": KEYS[2..] keys to delete
--   "dead":   KEYS[2] the run's dead letters, KEYS[3] where the ended run keeps them
--             (dead:<run>): renamed, or appended if that exists already
-- ARGV[1] the caller's fencing token
-- ARGV[2] the action
-- ARGV[3] (claim) the epoch the part takes ("" leaves it)
-- Returns {"ok", n} (n: keys deleted, letters moved) or {"lost", the token that holds the part}.
--
-- uses: guard   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local fence, action = tonumber(ARGV[1]), ARGV[2]
local held = redis.pcall("GET", KEYS[1])
if type(held) == "table" then return refused_kind(KEYS[1], "string") end
held = tonumber(held or "0") or 0

if action == "claim" then
  if held > fence then return {"lost", held} end
  redis.call("SET", KEYS[1], fence)
  if ARGV[3] ~= "" then redis.call("SET", KEYS[2], ARGV[3]) end
  return {"ok", 0}
end
if held ~= fence then return {"lost", held} end
if action == "unlink" then
  if #KEYS < 2 then return {"ok", 0} end
  return {"ok", redis.call("UNLINK", unpack(KEYS, 2))}
end
if action == "dead" then
  local source, target = KEYS[2], KEYS[3]
  if redis.call("EXISTS", source) == 0 then return {"ok", 0} end
  local moved = redis.call("LLEN", source)
  if redis.call("RENAMENX", source, target) == 0 then
    local letters = redis.call("LRANGE", source, 0, -1)
    for i = 1, #letters, BATCH do
      redis.call("RPUSH", target, unpack(letters, i, math.min(i + BATCH - 1, #letters)))
    end
    redis.call("DEL", source)
  end
  return {"ok", moved}
end
return redis.error_reply("runclear.lua: unknown action " .. tostring(action))
