# relay_header_functions(<header> <name regex> <out names> <out declarations>): the functions a C header
# declares whose names match the regex, in order, with the text of each declaration up to its "(" (for
# checks such as RELAYCC_API). Comments are dropped first (they name functions too); typedefs are no
# declarations. Used by CheckSymbols.cmake and CheckToolOnly.cmake. relay_header_data: the data a header
# declares extern (tables), by name.
function(relay_header_functions h nameRe outNames outDecls)
  file(READ ${h} text)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" text "${text}")
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")
  # A declaration: at the start of a line, a return type, then <name>( ... ;
  string(REGEX MATCHALL "\n[A-Za-z_][^;{}#]*[ *]${nameRe}[ \t]*\\(" ds "${text}")
  set(names)
  set(decls)
  foreach(d ${ds})
    if(d MATCHES "^\ntypedef[ \t]")
      continue()
    endif()
    string(REGEX MATCH "${nameRe}[ \t]*\\($" name "${d}")
    string(REGEX REPLACE "[ \t]*\\($" "" name "${name}")
    list(APPEND names ${name})
    list(APPEND decls "${d}")
  endforeach()
  set(${outNames} ${names} PARENT_SCOPE)
  set(${outDecls} ${decls} PARENT_SCOPE)
endfunction()

function(relay_header_data h outNames)
  file(READ ${h} text)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" text "${text}")
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")
  # Array bounds and semicolons go first: both would split or join CMake list elements.
  string(REGEX REPLACE "\\[[^;\n]*\\]" "" text "${text}")
  string(REPLACE ";" "@" text "${text}")
  # extern <type> <name>; on one line (no "(": not a function; no "{": not extern "C")
  string(REGEX MATCHALL "\nextern[ \t][^@(\n{}]*[ *][A-Za-z_][A-Za-z0-9_]*[ \t]*@" ds "${text}")
  set(names)
  foreach(d ${ds})
    string(REGEX MATCH "[A-Za-z_][A-Za-z0-9_]*[ \t]*@$" name "${d}")
    string(REGEX REPLACE "[ \t]*@$" "" name "${name}")
    list(APPEND names ${name})
  endforeach()
  set(${outNames} ${names} PARENT_SCOPE)
endfunction()
