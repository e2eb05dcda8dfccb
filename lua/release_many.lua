-- Release several holds in one call (dlock_release_many where one server keeps every name: one
-- Redis, or the master Sentinel follows). Not a script on its own: it is loaded after
-- release.lua, wrapped as a function of its own KEYS and ARGV, release_one
-- (src/redis/wire/scripts.cc), so that each hold goes through exactly what a single release
-- runs. The holds are independent: each one's answer is its own.
-- ARGV[1] n, how many holds. For each, in order: ARGV its key count c and release.lua's seven
-- arguments; KEYS the next c keys, release.lua's widest set for that hold (see its keys).
-- Returns release.lua's answer for each: 1 released, 0 this owner no longer held it.
local n = tonumber(ARGV[1])
local answers = {}
local key, arg = 0, 1
for k = 1, n do
  local count = tonumber(ARGV[arg + 1])
  local keys, args = {}, {}
  for i = 1, count do keys[i] = KEYS[key + i] end
  for i = 1, 7 do args[i] = ARGV[arg + 1 + i] end
  answers[k] = release_one(keys, args)
  key, arg = key + count, arg + 8
end
return answers
