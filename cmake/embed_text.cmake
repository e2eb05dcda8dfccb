# Writes OUT, a C++ file defining `const char NAMESPACE::SYMBOL[]` with the text of IN (a file that
# is the source of truth, embedded into the library at build time). Run with cmake -P.
file(READ ${IN} text)
file(WRITE ${OUT} "// Generated from ${IN} by cmake/embed_text.cmake. Do not edit.\n"
                  "namespace ${NAMESPACE} {\nextern const char ${SYMBOL}[];\n"
                  "const char ${SYMBOL}[] = R\"dlocktext(${text})dlocktext\";\n}\n")
