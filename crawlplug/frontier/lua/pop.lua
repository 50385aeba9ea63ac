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
-- ARGV[5], ARGV[6] (optional) the dedup mode and parameter of an admission
--         pipelined just before this pop (a sharded crawl's admit-and-pop, per shard:
--         crawlplug.frontier.sharded; one part's is one admit.lua call with its pop), whose dedup
--         keys, seq and series are then KEYS[11], KEYS[12], KEYS[13] and
--         KEYS[14..] (admit.lua's KEYS[1], [4], [13], [16..]): they are checked
--         too, so that a corrupt key that makes the admission refuse makes the
--         pop refuse as well, and the call changes nothing
-- KEYS[last - 1] run  hash  the current run (crawlplug.frontier.runs): a run ended by a
--                     limit or stopped by an operator leases nothing, and its crawl-wide
--                     limits (lim_pages, lim_items, lim_errors, lim_timeout ms since
--                     "started"; crawlplug.frontier.control) are checked against the
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
-- its delay). A call that may lease nothing (n = 0, or a limit reached)
-- returns {} (order "domain": {-1}) and writes nothing.
--
-- uses: guard epoch leases domains popping   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local node, n, lease_ms, order = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
dq_keys(7)
pop_setup(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[#KEYS - 1], node, n, lease_ms, order)

do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write
-- ---- all or nothing (guard.lua): every key and counter checked before the first write ----
do
  -- a plain pop's queue, requests and deliveries are checked by the reads it makes of
  -- them before its first write (popping.lua's pop_take; the run's by pop_read_run)
  local spec = pop_spec({})
  if NARGV >= 6 then -- an admission's mode and parameter come before the epoch
    -- what that admission checks, this pop checks too: one refuses with the other
    if order ~= "domain" then
      for _, key in ipairs({D.dq, D.domains}) do spec[#spec + 1] = {key, "zset"} end
      for _, key in ipairs({D.state, D.conf}) do spec[#spec + 1] = {key, "hash"} end
    end
    spec[#spec + 1] = {KEYS[12], "int"}
    spec[#spec + 1] = {KEYS[13], "any"} -- the series: a statistic, started again if need be (admit.lua)
    dedup_spec(spec, ARGV[5], KEYS[11], ARGV[6], 14, #KEYS - 2)
  end
  local refused = guard(spec) or guard_bloom_meta(spec) or pop_read_run()
  if refused then return refused end
end
-- ---- end of the checks ----

pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)
return pop_take()
