-- record.lua: a node's call record, and the guard that refuses a node's call when
-- Redis went back in time; not a script of its own: the loader puts it in front of
-- admit.lua (which writes the record), heartbeat.lua and renew.lua (which check it and
-- keep it alive).
--
-- The record (KEYS reply:<node>, a string) is "<call id>\n<reply>": the last admission of
-- the node that Redis applied, and what it answered (admit.lua answers that call, sent
-- again, with it). A call id is "<caller>:<n>": the caller a random token of one frontier
-- object, n counting its admissions from 1.
--
-- With a call, a node passes "<caller> <c>" (admit.lua: "<caller>:<n> <c>"), c the number
-- of its last admission whose reply said it was recorded (0: none, or not known since:
-- nothing is checked). A record older than that (a lower number, another caller's, none)
-- means Redis lost calls it had answered: it restarted from a snapshot older than them,
-- failed over to a replica that had not received them, or a backup was restored. Then
-- the ack of a page whose children were admitted in a lost call would delete the last
-- trace of those children, so the call is refused before any write, with
--   ROLLBACK <n found> <c>: ...
-- (crawlplug.errors.RolledBack): the node gives back every lease it holds, forgets the
-- fingerprints it knew, and calls again without the check (crawlplug.frontier.core).
--
-- The record lives REPLY_MS past the node's last admission or heartbeat (each renews it):
-- a node that stopped is forgotten, a live one never is (a record that expired under a
-- live node would read as a rollback).

local REPLY_MS = "900000" -- a string: a number sent to Redis is formatted ("%.17g") at each call

-- the caller and the number it checks, from "<caller>[:<n>] <c>" ("" = none: nil, 0)
local function record_check_arg(arg)
  local head, c = string.match(arg or "", "^(%S+)%s+(%d+)$")
  if head == nil then return nil, 0 end
  return string.match(head, "^(.*):%d+$") or head, tonumber(c)
end

-- the record's call id and reply text, or nil (absent, or a key of another type: SET
-- replaces it)
local function call_record(key)
  local last = redis.pcall("GET", key)
  if type(last) ~= "string" then return nil, nil end
  local id, rest = string.match(last, "^([^\n]*)\n(.*)$")
  return id, rest
end

-- the caller and the number of a call id "<caller>:<n>" (nil, 0 if it is none)
local function call_of(id)
  local who, num = string.match(id or "", "^(.*):(%d+)$")
  return who, tonumber(num) or 0
end

-- whether call ``call`` may replace the record ``recorded`` (a call id, nil: none): never by
-- an older call of the same caller (a call sent again after a newer one went through), so
-- the record never goes back (that would read as Redis gone back in time)
local function record_may_write(call, recorded)
  local who, n = call_of(call)
  local had, m = call_of(recorded)
  return who ~= had or n >= m
end

-- nil, or the refusal of a call from a node whose last recorded admission (c) Redis lost:
-- the record holds call id ``recorded`` (nil: none)
local function rollback_guard(caller, c, recorded)
  if c <= 0 then return nil end
  local who, n = call_of(recorded)
  if who ~= caller then n = 0 end
  if n >= c then return nil end
  return redis.error_reply("ROLLBACK " .. n .. " " .. c .. ": Redis holds an older state than this node's " ..
    "last recorded call (a restart from a snapshot, a failover to a replica that lagged, a restored backup); " ..
    "nothing was written")
end

-- keep a live node's record (heartbeat.lua, renew.lua): after the checks
local function record_renew(key)
  redis.call("PEXPIRE", key, REPLY_MS)
end
