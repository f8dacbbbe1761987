-- record: the definition record, the one-string codec of a job definition that the packed
-- and cold forms share (a job hash costs several times the memory of its record). A
-- record is "id|offset|age|dh|k" then name=len:value per definition field:
--   offset  due - the start of the record's bucket (ms); a packed job's bucket start is
--           0, so its offset is its due time
--   age     due - the time it was created (ms)
--   dh      the definition hash
--   k       how the schedule field 'sv' follows: '@' it is "@"..due, '+' it is
--           "+"..age, '.' it is stored among the fields
-- A payload split into chunks (shard/jobs.go appendPayload) is stored joined, as 'p'.
--- @include "common"

-- lengthStrs caches the strings of the lengths record_encode writes (most are short and
-- recur: a type's name, a payload's size); formatting one costs as much as the rest of
-- a definition field.
local lengthStrs = {}
local function length_str(n)
  local s = lengthStrs[n]
  if not s then
    s = num(n)
    if n < 1024 then
      lengthStrs[n] = s
    end
  end
  return s
end

-- record_encode packs what create_jobs would write for a scheduled one-time job into a
-- record, with its due time as offset from bucketStart. The fields between defStart and
-- defEnd of argv (the script's ARGV: a function's helpers cannot see it) are name,
-- value, ...
local function record_encode(id, due, dueStr, bucketStart, now, dh, argv, defStart, defEnd)
  -- A packed job's record (bucket start 0, age 0) needs no number formatted.
  local age = now == due and '0' or num(due - now)
  local parts = { id, '|', bucketStart == 0 and dueStr or num(due - bucketStart), '|', age, '|', dh, '|', '.' }
  local np = 9
  local payload
  for k = defStart, defEnd, 2 do
    local f, v = argv[k], argv[k + 1]
    if f == 'sv' then
      if v == '@' .. dueStr then
        parts[9] = '@'
      elseif v == '+' .. age then
        parts[9] = '+'
      else
        parts[np + 1], parts[np + 2] = 'sv=' .. length_str(#v) .. ':', v
        np = np + 2
      end
    elseif f == 'p' or (#f == 2 and string.byte(f) == 112 and string.byte(f, 2) <= 57) then
      -- A payload chunk: p, p1 … p7 (the field names that start with p are those and pr;
      -- '9' is 57, 'r' 114).
      payload = payload and payload .. v or v
    else
      parts[np + 1], parts[np + 2] = f .. '=' .. length_str(#v) .. ':', v
      np = np + 2
    end
  end
  if payload then
    parts[np + 1], parts[np + 2] = 'p=' .. length_str(#payload) .. ':', payload
  end
  return table.concat(parts)
end

-- record_decode unpacks a record of bucket b (a number) into the job id, the due time
-- (a string) and the fields of the job hash it stands for, scheduled (HGETALL's form:
-- name, value, ...; 'cr' is field 6). The offset and age may be negative (a packed
-- job's offset is its due time).
local function record_decode(rec, b, bucketMs)
  local id, off, age, dh, k, pos = string.match(rec, '^([^|]*)|(-?%d+)|(-?%d+)|([^|]*)|(.)()')
  local due = b * bucketMs + tonumber(off)
  local dueStr = num(due)
  local f = { 'st', 'scheduled', 'nx', dueStr, 'cr', num(due - tonumber(age)), 'dh', dh, 'rl', ',' }
  if k == '@' then
    f[11], f[12] = 'sv', '@' .. dueStr
  elseif k == '+' then
    f[11], f[12] = 'sv', '+' .. age
  end
  while pos <= #rec do
    local name, len, at = string.match(rec, '^([^=]*)=(%d+):()', pos)
    pos = at + tonumber(len)
    local v = string.sub(rec, at, pos - 1)
    if name == 'p' and #v <= 512 then
      -- Chunked again as shard/jobs.go stores a payload of up to 8 x 64 bytes.
      for c = 0, math.floor((#v - 1) / 64) do
        f[#f + 1], f[#f + 2] = c == 0 and 'p' or 'p' .. c, string.sub(v, c * 64 + 1, c * 64 + 64)
      end
    else
      f[#f + 1], f[#f + 2] = name, v
    end
  end
  return id, dueStr, f
end
