-- admit.lua: admit a batch of requests and acknowledge finished leases, in one
-- atomic step, and then, if asked (ARGV[5]), lease requests to the node as pop.lua
-- does, in the same call (Frontier.admit_and_pop: one guard pass, one epoch check for
-- both). A request's fingerprint is recorded only together with the
-- request itself (never one without the other). A parent's ack comes in this call
-- or a later one than those that stored the requests its callback produced (they are
-- flushed while it runs, its ack once Scrapy is done with it): so a call from a node
-- whose earlier calls Redis lost (it went back in time) is refused (record.lua), and
-- the node gives back what it holds instead of acking it.
--
-- KEYS[1] seen        the dedup state: set (mode "set"), zset fingerprint ->
--                     expiry ms (mode "ttl"), the Bloom filter's spec hash
--                     (mode "bloom"), a native Bloom filter (mode "bf"), the
--                     compact store's hash of generations (mode "hash")
-- KEYS[2] queue       zset  request id -> score
-- KEYS[3] requests    hash  request id -> payload
-- KEYS[4] seq         str   last request id
-- KEYS[5] leases      zset  request id -> lease deadline (ms)
-- KEYS[6] leased      hash  request id -> "node|score|deliveries[|domain]"
-- KEYS[7] deliveries  hash  request id -> deliveries so far
-- KEYS[8] stats       hash  crawl-wide counters
-- KEYS[9..12]         the per-domain queue: dq, domains, dstate, dconf
--                     (see domains.lua), checked and touched only by a call with a
--                     request with a domain, a lease event or an ack of a per-domain
--                     lease; dconf "cap:o" (an operator's) or else
--                     "cap:s" (the nodes' CRAWLPLUG_DOMAIN_PAGES) caps the requests
--                     of one domain admitted in a run, counted in dstate "c:<domain>"
-- KEYS[13] series     hash  "a:<bucket>" acked, "e:<bucket>" enqueued, per 10 s;
--                     "busy_from", "busy_to": the span (ms) the crawl has been busy
-- KEYS[14] reply      str   "<call id>\n<reply>": the caller node's last reply (see ARGV[4]
--                            and record.lua)
-- KEYS[15] run       hash  the current run: read by the pop of ARGV[5] only (pop.lua's
--                     KEYS[last - 1]: its state and limits)
-- KEYS[16..]          mode "bloom" only, per filter (newest generation first):
--                     its hash of layer counts, then the bit strings of every
--                     layer the caller knows (plus one spare layer for the
--                     current filter), chunk by chunk; mode "hash": the bucket
--                     hashes the batch's fingerprints fall in, each once (dedup.lua)
-- KEYS[last] epoch     str   the part's epoch (epoch.lua)
-- ARGV[1] dedup mode: "set", "hash", "ttl", "bloom", "bf" or "none" (every request admitted)
-- ARGV[2] node id of the caller
-- ARGV[3] mode parameter: "ttl": default time-to-live (ms); "bf": "<error
--         rate> <capacity>"; "bloom": lines, first "<generation window ms,
--         0 = none> <generation expected> <key expiry ms, 0 = none>", then per
--         filter "<m>,<k>,<capacity>,<chunks>,<chunk bits>;..." for its layers;
--         "hash": "<G> <bucketing>;<strip>,<capacity>;..." per generation (dedup.lua)
-- ARGV[4] "<call id> <c>" ("" = none): the id "<caller>:<n>" names this exact call, so
--         that a call sent again after its reply was lost (the connection reset after
--         the script ran) answers the reply it had, doing nothing twice: a call with
--         the id of the reply in KEYS[14] returns that reply. The caller sends an id
--         once, and again only with the same keys and arguments (but for ARGV[5]: a
--         call sent again with or without its pop answers the same admission reply).
--         c is the number of the caller's last admission recorded (record.lua): a
--         record older than that refuses the call with "ROLLBACK ...", writing nothing.
-- ARGV[5] the pop after the admission: "" none, else "<N> <lease ms> <order>" (pop.lua's
--         ARGV[2], [3], [4]; the node is ARGV[2]). Its checks are made with the
--         admission's, before the first write: a key that refuses either refuses the
--         call, which then changed nothing.
-- ARGV[6] A = number of lease ids to acknowledge, then ARGV[7 .. 6+A] the ids
-- then E = number of lease events, then E pairs (lease id, kind): what the
-- node saw happen to its requests of the per-domain queue, "s" sent, "r"
-- download ended (see dq_event in domains.lua); repeating one is harmless
-- then, per request, four arguments: dedup key ("" = dont_filter), score,
-- payload (an empty payload only records the fingerprint: a dupefilter used
-- on its own), domain ("" = the plain queue, else the per-domain queue). The dedup key is the raw fingerprint ("set"), "<ttl ms>:<raw
-- fingerprint>" ("ttl", ttl "" = default), "<h1>,<h2>,<h3>" ("bloom") or, per
-- generation, two bytes naming its bucket key among KEYS[16..], then the raw
-- fingerprint ("hash").
-- ARGV[last] the caller's epoch (epoch.lua)
-- Returns {flags, acked, stale, state} (acked: requests, start entries not counted): flags has one char per request, "1"
-- admitted, "0" filtered as a duplicate, "c" refused by its domain's page cap
-- (its fingerprint is not recorded: a raised cap, or the next run, admits it); stale counts acks of leases this
-- node no longer held; state is, for mode "bloom", the layer count of each
-- filter passed ("3,2,2"), for mode "hash" the generation count. Mode "hash" may
-- instead answer {"STALE", generations}, changing nothing, when the caller's
-- generation count is not Redis's. Mode "bloom" may instead answer, changing nothing:
-- {"STALE", state} when another node grew a filter beyond the layers the
-- caller passed, or {"STALE_GEN", generation} when the caller's generation is
-- not Redis's current one: call again knowing that. It returns {"PARTIAL",
-- flags, state} when the filter needed a second new layer within this batch:
-- the requests flags covers are done, no ack was made; call again with the
-- rest of the batch (and the acks) and the new layer's keys.
-- With a pop (ARGV[5]), it returns {admission reply, pop.lua's reply}; or, when the
-- admission's reply is "STALE", "STALE_GEN" or "PARTIAL" (the caller calls again),
-- {admission reply} alone: nothing was leased. A call sent again (ARGV[4]) answers
-- the stored admission reply and the leases its pop gave (those the node still holds).
--
-- Request ids never repeat, not even after Redis went back in time (leases.lua's id_floor).
-- A reply the record could not keep (a full Redis refused the SET as the call's only
-- write) ends with one more element, "unrecorded": the caller then does not count it
-- as recorded.
--
-- uses: guard epoch record leases domains bloom dedup popping   (the pieces put in front of this script: crawlplug/frontier/scripts.py)

local seen, queue, requests, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local leases, leased, deliveries, stats = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local mode, node, param = ARGV[1], ARGV[2], ARGV[3]
local call = string.match(ARGV[4], "^%S*")
local caller, confirmed = record_check_arg(ARGV[4])
local acks_at = 6 -- ARGV[acks_at]: the number of acks (A)
local nacks = tonumber(ARGV[acks_at])
local FIRST_EXTRA = 16 -- KEYS[FIRST_EXTRA..]: the Bloom filter's keys, mode "hash"'s buckets
dq_keys(9)
local popping = ARGV[5] ~= ""
if popping then -- popping.lua, over this script's keys
  local pop_n, pop_ms, pop_order = string.match(ARGV[5], "^(%d+) (%d+) (%S+)$")
  pop_setup(queue, requests, leases, leased, deliveries, stats, KEYS[15], node, tonumber(pop_n),
            tonumber(pop_ms), pop_order)
end

do local stale = epoch_guard() if stale then return stale end end -- epoch.lua: before any write
-- A replay of the caller's last call: answer what it answered, change nothing (a pop
-- asked with it answers the leases it gave, popping.lua's pop_replay; one asked now of a
-- call first sent without is made afresh, below).
local reply_key = KEYS[14]
local replayed, replayed_pop, recorded
if call ~= "" then
  local last
  recorded, last = call_record(reply_key)
  if recorded == call then
    local parts = {}
    for part in string.gmatch(last .. "\n", "([^\n]*)\n") do parts[#parts + 1] = part end
    if parts[1] == "P" then
      replayed = {"PARTIAL", parts[2], parts[3]}
    else
      replayed = {parts[2], tonumber(parts[3]), tonumber(parts[4]), parts[5]}
      replayed_pop = parts[6] -- the leases it gave (pop_record_text), if it popped
    end
    if not popping or parts[1] == "P" then return popping and {replayed} or replayed end
  else
    -- Redis went back in time past the caller's last recorded call (record.lua)
    local refused = rollback_guard(caller, confirmed, recorded)
    if refused then return refused end
  end
end
-- Replies are kept for a retry after an outage (CRAWLPLUG_REDIS_OUTAGE_TIMEOUT, 300 s by
-- default), renewed by the node's heartbeats (record.lua); a call sent again later than
-- this is run again (its new requests then count as duplicates: nothing is lost).
-- The record of this call (record.lua), and its reply: the admission's, then (``popped``)
-- the leases its pop gave, as pop_record_text keeps them.
local function answer(reply, popped)
  if call ~= "" then
    local text
    if reply[1] == "PARTIAL" then
      text = "P\n" .. reply[2] .. "\n" .. reply[3]
    else
      text = "R\n" .. reply[1] .. "\n" .. reply[2] .. "\n" .. reply[3] .. "\n" .. reply[4]
      if popped then text = text .. "\n" .. pop_record_text(popped) end
    end
    -- the last write: a full Redis refuses it only as a call's first write, when the
    -- call changed nothing else (and sent again, changes nothing either); the reply is
    -- then not kept, and the call answers all the same, saying so
    if record_may_write(call, recorded) then
      local kept = redis.pcall("SET", reply_key, call .. "\n" .. text, "PX", REPLY_MS)
      if type(kept) == "table" and kept.err then reply[#reply + 1] = "unrecorded" end
    else
      reply[#reply + 1] = "unrecorded" -- a newer call of this caller's holds the record
    end
  end
  if popped then return {reply, popped} end
  return reply
end
pcall(redis.replicate_commands) -- effects replication on Redis < 7 (TIME before writes)

-- the reply of a call with a pop: the admission's, then the leases, both recorded. (A
-- refusal of a key the pop reads is answered alone; it cannot come after the admission's
-- checks, which checked those keys.)
local function popped_after(admitted)
  local popped = pop_take()
  if popped.err then return popped end
  return answer(admitted, popped)
end

local nevents = tonumber(ARGV[acks_at + 1 + nacks])
local first_item = acks_at + 2 + nacks + 2 * nevents
-- the leases acked, read before the checks: the read that fails on a leased of the wrong
-- type is its check, and their records say whether an ack ends a per-domain lease
local ack_infos = {}

-- Request ids: the numbers after seq not in use (next_id's rule), for every request of the
-- batch that may be stored, asked in one HMGET before the first write (the read that
-- checks requests, when there are any); seq moves once, by the numbers taken. The
-- numbers start at id_floor() at least (leases.lua), never below it.
-- (seq's value is the one guard() read: nothing wrote it since.)
local seq_at, ids, in_use, taken = 0, {}, {}, 0
local function reserve_ids()
  seq_at = math.max(tonumber(GUARDED[seq] or "0") or 0, id_floor())
  for j = first_item + 2, NARGV, 4 do
    if ARGV[j] ~= "" then ids[#ids + 1] = string.format("%016d", seq_at + #ids + 1) end
  end
  if #ids > 0 then in_use = checked_hmget(requests, ids) end
  return in_use
end

-- ---- all or nothing (guard.lua): every key and counter checked before the first write ----
-- (those of the pop of ARGV[5] too: a plain pop's queue, requests and deliveries are
-- among the admission's own)
do
  if nacks > 0 and not replayed then
    ack_infos = checked_hmget(leased, ARGV, acks_at + 1, acks_at + nacks)
    if not ack_infos then return refused_kind(leased, "hash") end
  end
  -- the per-domain queue's keys are checked by every call, also one that touches none of
  -- them: a pop of the same part sent after it in one pipeline (a sharded crawl's
  -- admit-and-pop) checks them, and the part's share of a call refused there must not
  -- have been written by its admission
  local spec = {{seq, "int"}, {queue, "zset"}, {leases, "zset"}, {leased, "hash"}, {deliveries, "hash"},
                {stats, "counters"}, {KEYS[13], "any"}}
  for _, key in ipairs({D.dq, D.domains}) do spec[#spec + 1] = {key, "zset"} end
  for _, key in ipairs({D.state, D.conf}) do spec[#spec + 1] = {key, "hash"} end
  if popping then pop_spec(spec) end
  local refused = guard(dedup_spec(spec, mode, seen, param, FIRST_EXTRA, #KEYS - 1)) or guard_bloom_meta(spec)
  if refused then return refused end
  local j = first_item - 4
  refused = dedup_check(mode, param, seen, FIRST_EXTRA, function() -- dedup.lua: the lookups made here
    j = j + 4
    if j + 3 <= NARGV then return ARGV[j] end
  end)
  if refused and refused.err then return refused end
  if refused then return popping and {refused} or refused end -- changed nothing: the caller calls again
  if popping then
    refused = pop_read_run()
    if refused then return refused end
  end
  -- a call sent again: its pop answers the leases it gave (reads only), or pops now if the
  -- call was first sent without one (its plain queue's reads check requests first)
  if replayed and replayed_pop then return {replayed, pop_replay(replayed_pop)} end
  if replayed then return popped_after(replayed) end
  if not reserve_ids() then return refused_kind(requests, "hash") end
  refused = guard({{requests, "hash"}}) -- a batch with no request to store: checked alone
  if refused then return refused end
end
-- ---- end of the checks ----


do -- the dedup mode's state (dedup.lua; the Bloom filter's keys from KEYS[16])
  local again = dedup_prepare(mode, param, seen, FIRST_EXTRA)
  if again then return popping and {again} or again end -- changed nothing: the caller calls again, then pops
end

local flags = {}
local admitted, filtered, capped = 0, 0, 0
-- the page cap of each domain (CRAWLPLUG_DOMAIN_PAGES), read once if a request has a domain
local cap
local function domain_capped(domain)
  if cap == nil then
    local v = redis.call("HMGET", D.conf, "cap:o", "cap:s")
    cap = tonumber(v[1]) or tonumber(v[2]) or 0
  end
  return cap > 0 and (tonumber(redis.call("HGET", D.state, "c:" .. domain)) or 0) >= cap
end
local partial = false
local dq_now

local function take_id()
  while true do
    taken = taken + 1
    local id = ids[taken]
    if id == nil then -- past the block (ids in use were skipped): one at a time
      id = string.format("%016d", seq_at + taken)
      if redis.call("HEXISTS", requests, id) == 0 then return id end
    elseif not in_use[taken] then
      return id
    end
  end
end

local stored, queued = {}, {} -- HSET requests and ZADD queue arguments, sent once
local i = first_item
while i + 3 <= NARGV do
  local dkey, score, payload, domain = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local new = 1
  if domain ~= "" and payload ~= "" and domain_capped(domain) then
    new = -1 -- over its domain's cap: not admitted, its fingerprint not recorded
  elseif dkey ~= "" then
    new = dedup_add(dkey)
    if new == nil then
      partial = true -- the Bloom filter needs a layer whose keys we were not given
      break
    end
  end
  if new == 1 and payload == "" then
    flags[#flags + 1] = "1"
  elseif new == 1 then
    local id = take_id()
    stored[#stored + 1] = id
    stored[#stored + 1] = payload
    if domain == "" then
      queued[#queued + 1] = score
      queued[#queued + 1] = id
    else
      dq_now = dq_now or redis_now_ms()
      dq_add(domain, score, id, dq_now)
      add_to_field(D.state, "c:" .. domain, 1) -- requests of it admitted in this run (its page cap)
    end
    admitted = admitted + 1
    flags[#flags + 1] = "1"
  elseif new == -1 then
    capped = capped + 1
    flags[#flags + 1] = "c"
  else
    filtered = filtered + 1
    flags[#flags + 1] = "0"
  end
  i = i + 4
end
if taken > 0 then redis.call("SET", seq, string.format("%d", seq_at + taken)) end
variadic("HSET", requests, stored)
variadic("ZADD", queue, queued)

local acked, stale, starts_acked = 0, 0, 0
local owner_prefix = node .. "|"
for e = acks_at + 2 + nacks, acks_at + 1 + nacks + 2 * nevents, 2 do
  local id = ARGV[e]
  local info = redis.call("HGET", leased, id)
  if info and string.sub(info, 1, #owner_prefix) == owner_prefix then
    dq_now = dq_now or redis_now_ms()
    dq_event(leased, id, info, ARGV[e + 1], dq_now)
  end
end
if partial then nacks = 0 end -- parents are acked only once all their children are stored
if nacks > 0 then
  -- read again after events, which may have marked a lease's download ended
  local infos = ack_infos
  if nevents > 0 then infos = hmget(leased, ARGV, acks_at + 1, acks_at + nacks) end
  -- leases ended (their requests and delivery counts deleted too), and reaped requests done
  local ended, done, seen_ids = {}, {}, {}
  for a = 1, nacks do
    local id, info = ARGV[acks_at + a], infos[a]
    if seen_ids[id] then
      stale = stale + 1 -- acked twice in one call: the second finds nothing left, as one at a time would
    elseif info and string.sub(info, 1, #owner_prefix) == owner_prefix then
      ended[#ended + 1] = id
      local _, score, _, domain, freed = lease_info(info)
      if domain ~= "" then
        dq_now = dq_now or redis_now_ms()
        dq_end(domain, id, freed, dq_now)
      end
      if is_start(score) then
        starts_acked = starts_acked + 1 -- a start entry, not a page: not counted as done
      else
        acked = acked + 1
      end
    elseif not info and redis.call("HEXISTS", deliveries, id) == 1 and redis.call("ZREM", queue, id) == 1 then
      -- reaped back into the queue while we stalled, not yet taken by anyone:
      -- the work is done now, so finish it instead of doing it twice (plain
      -- queues only: in the per-domain queue such an ack counts as stale).
      -- Only a request that was delivered before (reaped ones keep their
      -- delivery count): after a failover that rolled back seq, a new request
      -- may carry the id of a lease that was lost, and must not be taken for it
      done[#done + 1] = id
      acked = acked + 1
    else
      stale = stale + 1
    end
    seen_ids[id] = true
  end
  variadic("ZREM", leases, ended)
  variadic("HDEL", leased, ended)
  variadic("HDEL", requests, ended)
  variadic("HDEL", deliveries, ended)
  variadic("HDEL", requests, done)
  variadic("HDEL", deliveries, done)
end

if admitted > 0 then redis.call("HINCRBY", stats, "enqueued", admitted) end
if filtered > 0 then redis.call("HINCRBY", stats, "filtered", filtered) end
if capped > 0 then add_to_field(stats, "capped", capped) end
if acked > 0 then redis.call("HINCRBY", stats, "acked", acked) end
if starts_acked > 0 then redis.call("HINCRBY", stats, "start_acked", starts_acked) end
if stale > 0 then redis.call("HINCRBY", stats, "stale_acks", stale) end
if acked > 0 or admitted > 0 then
  dq_now = dq_now or redis_now_ms()
  local bucket = math.floor(dq_now / 10000)
  -- the span the crawl has been busy, first admission to last ack, so rates are taken
  -- over the time it actually ran (crawlplug.ops.status.rates); an idle minute starts a new one
  add_to_series(KEYS[13], bucket, acked, admitted, dq_now)
end
local state = dedup_finish() -- dedup.lua: what the caller learns (Bloom layers, "hash" generations)
if partial then
  local reply = answer({"PARTIAL", table.concat(flags), state})
  return popping and {reply} or reply -- the caller admits the rest, then pops
end
local reply = {table.concat(flags), acked, stale, state}
if popping then return popped_after(reply) end
return answer(reply)
