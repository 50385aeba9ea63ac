-- pop.lua: lease up to N requests to a node, in queue order, and return them.
--
-- KEYS[1] queue       zset  request id -> score
-- KEYS[2] requests    hash  request id -> payload
-- KEYS[3] leases      zset  request id -> lease deadline (ms, Redis clock)
-- KEYS[4] leased      hash  request id -> "node|score|deliveries[|domain]"
-- KEYS[5] deliveries  hash  request id -> deliveries so far
-- KEYS[6] stats       hash  crawl-wide counters
-- KEYS[7..10]         the per-domain queue: dq, domains, dstate, dconf
--                     (see domains.lua): order "domain" only
-- KEYS[last] epoch    str   the part's epoch (epoch.lua)
-- ARGV[1] node id
-- ARGV[2] N, most requests to lease
-- ARGV[3] lease duration (ms)
-- ARGV[4] "min" (lowest score first), "max" (highest score first) or
--         "domain" (the per-domain queue: ready domains, earliest first)
-- ARGV[5] "<call id> <c>" ("" = none), as admit.lua's ARGV[4]: a pop sent again after its
--         reply was lost answers the leases it gave (those the node still holds), and the
--         node's call record (KEYS[last - 2], record.lua) is checked and kept
-- ARGV[6], ARGV[7] (optional) the dedup mode and parameter of an admission
--         pipelined just before this pop (a sharded crawl's admit-and-pop, per shard:
--         crawlplug.frontier.core; one part's is one admit.lua call with its pop), whose dedup
--         keys, seq and series are then KEYS[11], KEYS[12], KEYS[13] and
--         KEYS[14..] (admit.lua's KEYS[1], [4], [13], [16..]): they are checked
--         too, so that a corrupt key that makes the admission refuse makes the
--         pop refuse as well, and the call changes nothing
-- KEYS[last - 2] reply str   the node's call record (record.lua)
-- KEYS[last - 1] run  hash  the current run (crawlplug.crawl.runs): a run ended by a
--                     limit or stopped by an operator leases nothing, and its crawl-wide
--                     limits (lim_pages, lim_items, lim_errors, lim_timeout ms since
--                     "started"; crawlplug.crawl.control) are checked against the
--                     counters in KEYS[6]: a page limit leases at most what is left of it
--                     after the pages done and the leases held. Absent (a shard, a
--                     frontier driven without runs): no limit
-- ARGV[last] the caller's epoch (epoch.lua); KEYS[last] the part's epoch key
-- Returns a flat list {id, payload, deliveries, id, payload, deliveries, ...};
-- order "domain" returns four elements per request, the fourth saying what
-- the node must report on it (admit.lua events): "s" when sent (its domain
-- has a delay, or it is the domain's first request: the domain waits for
-- it), "r" when its download ended (its domain has a delay or a concurrency
-- limit), e.g. "sr", or "" for nothing; and then one more
-- element: milliseconds until the next domain is ready (-1: none waits on
-- its delay). Last comes the number of requests still queued (in the queue the
-- order reads). A call that may lease nothing (n = 0, or a limit reached)
-- returns {queued} (order "domain": {-1, queued}) and writes nothing.
--
-- uses: guard epoch record leases domains popping   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local node, n, lease_ms, order = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local call = string.match(ARGV[5], "^%S*")
local reply_key = KEYS[#KEYS - 2]
dq_keys(7)
pop_setup(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[#KEYS - 1], node, n, lease_ms, order)

do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write
-- A pop sent again (its id the record's): the leases it gave, below. Else the record must be
-- as new as the caller's last recorded call (record.lua: Redis did not go back in time).
local replayed, recorded
if call ~= "" then
  local last
  recorded, last = call_record(reply_key)
  if recorded == call then
    replayed = string.match(last, "^L\n(.*)$")
  else
    local caller, confirmed = record_check_arg(ARGV[5])
    local refused = rollback_guard(caller, confirmed, recorded)
    if refused then return refused end
  end
end
-- ---- all or nothing (guard.lua): every key and counter checked before the first write ----
do
  -- a plain pop's queue, requests and deliveries are checked by the reads it makes of
  -- them before its first write (popping.lua's pop_take; the run's by pop_read_run)
  local spec = pop_spec({})
  if NARGV >= 7 then -- an admission's mode and parameter come before the epoch
    -- what that admission checks, this pop checks too: one refuses with the other
    if order ~= "domain" then
      for _, key in ipairs({D.dq, D.domains}) do spec[#spec + 1] = {key, "zset"} end
      for _, key in ipairs({D.state, D.conf}) do spec[#spec + 1] = {key, "hash"} end
    end
    spec[#spec + 1] = {KEYS[12], "int"}
    spec[#spec + 1] = {KEYS[13], "any"} -- the series: a statistic, started again if need be (admit.lua)
    dedup_spec(spec, ARGV[6], KEYS[11], ARGV[7], 14, #KEYS - 3)
  end
  local refused = guard(spec) or guard_bloom_meta(spec) or pop_read_run()
  if refused then return refused end
end
-- ---- end of the checks ----

if replayed then return pop_replay(replayed) end
pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
local out = pop_take()
if call ~= "" and not out.err and #out > (order == "domain" and 2 or 1) and record_may_write(call, recorded) then
  -- recorded only when it leased (an empty pop writes nothing: a full Redis answers it);
  -- after the leases, so never a first write a full Redis refuses
  redis.call("SET", reply_key, call .. "\nL\n" .. pop_record_text(out), "PX", REPLY_MS)
end
return out
