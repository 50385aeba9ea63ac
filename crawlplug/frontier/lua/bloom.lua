-- bloom.lua: the Lua Bloom filter of admit.lua (mode "bloom"); not a script of its
-- own: the loader puts it in front of the scripts whose header uses it.
--
-- The Bloom state is a list of filters, newest first: one filter, or one per
-- generation (time window) when the filter forgets. Each filter is a chain of
-- layers. Only the current (first) filter is written to and may grow.
-- bloom_setup(param, first_key) reads the caller's description of the filters
-- (admit.lua's ARGV[3]) and their keys from KEYS[first_key]; bloom_start() reads
-- the current layer's count; bloom_add(dkey) checks and records one URL;
-- bloom_counts() is what the caller learns back (each filter's layer count).
-- Uses redis_now_ms (leases.lua).

-- -- Bloom filter -------------------------------------------------------------
-- The Bloom state is a list of filters, newest first: one filter, or one per
-- generation (time window) when the filter forgets. Each filter is a chain of
-- layers. Only the current (first) filter is written to and may grow.
local B = {window = 0, expire_ms = 0, filters = {}, current_count = 0, added = 0}

-- returns nil when ready, or the reply telling the caller to call again
local function bloom_setup(param, first_key)
  local lines = {}
  for line in string.gmatch(param, "[^\n]+") do lines[#lines + 1] = line end
  local win, gen, exp = string.match(lines[1], "^(%d+) (%-?%d+) (%d+)$")
  B.window, B.expire_ms = tonumber(win), tonumber(exp)
  if B.window > 0 then
    local current = math.floor(redis_now_ms() / B.window)
    if current ~= tonumber(gen) then return {"STALE_GEN", current} end
  end
  local key = first_key
  local stale = false
  for f = 2, #lines do
    local filter = {meta = KEYS[key], layers = {}}
    key = key + 1
    for m, k, cap, chunks, cb in string.gmatch(lines[f], "(%d+),(%d+),(%d+),(%d+),(%d+)") do
      local layer = {m = tonumber(m), k = tonumber(k), cap = tonumber(cap), cb = tonumber(cb), keys = {}}
      for c = 1, tonumber(chunks) do
        layer.keys[c] = KEYS[key]
        key = key + 1
      end
      filter.layers[#filter.layers + 1] = layer
    end
    -- what guard_bloom_meta read of it (its check, before any write), else read now
    local read = GUARDED[filter.meta]
    filter.read = type(read) == "table" and read or nil
    if filter.read then
      filter.n = tonumber(filter.read[1] or "0")
    else
      filter.n = tonumber(redis.call("HGET", filter.meta, "layers") or "0")
    end
    -- the current filter needs one spare layer beyond those that exist
    local usable = #filter.layers - (f == 2 and 1 or 0)
    if filter.n > usable then stale = true end
    B.filters[#B.filters + 1] = filter
  end
  if stale then
    local counts = {}
    for f, filter in ipairs(B.filters) do counts[f] = filter.n end
    return {"STALE", table.concat(counts, ",")}
  end
  return nil
end


local function bloom_create(filter, index)
  local layer = filter.layers[index]
  local bits = layer.m * layer.k
  for c, key in ipairs(layer.keys) do
    local n = math.min(layer.cb, bits - (c - 1) * layer.cb)
    -- one exact allocation now, instead of strings growing (and over-allocating) bit by bit
    redis.call("SETRANGE", key, math.ceil(n / 8) - 1, "\0")
    if B.expire_ms > 0 then redis.call("PEXPIRE", key, B.expire_ms) end
  end
  filter.n = index
  redis.call("HSET", filter.meta, "layers", index)
  if B.expire_ms > 0 then redis.call("PEXPIRE", filter.meta, B.expire_ms) end
end

-- triple hashing: x_0 = h1, x_{j+1} = x_j + s_j, s_{j+1} = s_j + h3 (mod m);
-- every value stays below 2^49, so double arithmetic is exact
local function bloom_bits(layer, h1, h2, h3, fn)
  local m = layer.m
  local x, step, bump = h1 % m, h2 % m, h3 % m
  for j = 0, layer.k - 1 do
    local pos = j * m + x
    local chunk = math.floor(pos / layer.cb)
    if not fn(layer.keys[chunk + 1], pos - chunk * layer.cb) then return false end
    x = (x + step) % m
    step = (step + bump) % m
  end
  return true
end

local function getbit(key, offset) return redis.call("GETBIT", key, offset) == 1 end
local function setbit(key, offset) redis.call("SETBIT", key, offset, 1) return true end

-- the current layer's count is kept here during a call (B.current_count, B.added new
-- since it was read) and written once: when the layer fills and the next is chained,
-- and in bloom_counts, the last thing a call asks
local function bloom_flush()
  if B.added > 0 then
    local current = B.filters[1]
    redis.call("HSET", current.meta, "count:" .. current.n, B.current_count)
    B.added = 0
  end
end

local function bloom_counts()
  bloom_flush()
  local counts = {}
  for f, filter in ipairs(B.filters) do counts[f] = filter.n end
  return table.concat(counts, ",")
end

-- Make sure the current layer has room; false if it is full and the caller
-- passed no spare layer to chain (the batch is then cut here: see PARTIAL).
local function bloom_room()
  local filter = B.filters[1]
  if filter.n == 0 then
    bloom_create(filter, 1)
    B.current_count = 0
  end
  if B.current_count >= filter.layers[filter.n].cap then
    if filter.n >= #filter.layers then return false end
    bloom_flush() -- the full layer's count, before the next is chained
    bloom_create(filter, filter.n + 1)
    B.current_count = 0
  end
  return true
end

-- 1 if new (and recorded), 0 if seen, nil if new but the filter needs a layer
-- whose keys the caller did not pass (nothing recorded then)
local function bloom_add(dkey)
  local a, b, c = string.match(dkey, "^(%d+),(%d+),(%d+)$")
  local h1, h2, h3 = tonumber(a), tonumber(b), tonumber(c)
  for _, filter in ipairs(B.filters) do
    for i = filter.n, 1, -1 do -- newest first: recent URLs are the likely duplicates
      if bloom_bits(filter.layers[i], h1, h2, h3, getbit) then return 0 end
    end
  end
  if not bloom_room() then return nil end
  local current = B.filters[1]
  bloom_bits(current.layers[current.n], h1, h2, h3, setbit)
  B.current_count = B.current_count + 1
  B.added = B.added + 1
  return 1
end

-- the current layer's count, read once per call
local function bloom_start()
  local current = B.filters[1]
  if current.read and current.read[1] then -- count:<layers>, as guard_bloom_meta read it
    B.current_count = tonumber(current.read[2] or "0")
  else
    B.current_count = tonumber(redis.call("HGET", current.meta, "count:" .. current.n) or "0")
  end
  B.added = 0
end

