# Writes OUT, a C++ file defining dlock::redis::kScriptSources: one entry per Lua script,
# keyed by file name without ".lua". Run with cmake -P.
set(body "// Generated from lua/*.lua by cmake/embed_lua.cmake. Do not edit.\n")
string(APPEND body "#include \"redis/wire/scripts.h\"\n\nnamespace dlock::redis {\n")
string(APPEND body "const ScriptSource kScriptSources[] = {\n")
string(REPLACE "|" ";" SCRIPTS "${SCRIPTS}")
foreach(path ${SCRIPTS})
  get_filename_component(name ${path} NAME_WE)
  file(READ ${path} text)
  string(APPEND body "  {\"${name}\", R\"dlocklua(${text})dlocklua\"},\n")
endforeach()
string(APPEND body "};\nconst int kScriptCount = sizeof(kScriptSources) / sizeof(kScriptSources[0]);\n")
string(APPEND body "}  // namespace dlock::redis\n")
file(WRITE ${OUT} "${body}")
