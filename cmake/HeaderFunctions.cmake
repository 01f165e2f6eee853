# Reading C sources in CMake, for CheckSymbols.cmake, CheckToolOnly.cmake and CheckFloors.cmake.
# relay_source_text(<file> <out>): the file's text without its comments (they name functions too). A caller
# that matches whole declarations writes ";" as "@" and drops "[" and "]" first: MATCHALL returns a CMake
# list, where a ";" splits an element and brackets join elements.
function(relay_source_text f out)
  file(READ ${f} text)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" text "${text}")
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# relay_not_a_function(<name> <out>): a statement keyword ("for (" inside a function body) or a compiler
# word ("__launch_bounds__(") that a declaration reader can take for a function's name.
function(relay_not_a_function name out)
  set(${out} OFF PARENT_SCOPE)
  if(name MATCHES "^(for|if|while|switch|return|sizeof|do|else|case|__.*)$")
    set(${out} ON PARENT_SCOPE)
  endif()
endfunction()

# relay_header_functions(<header> <name regex> <out names> <out declarations>): the functions a C header
# declares whose names match the regex, in order, with the text of each declaration up to its "(" (for
# checks such as RELAYCC_API); typedefs are no declarations.
function(relay_header_functions h nameRe outNames outDecls)
  relay_source_text(${h} text)
  # A declaration: at the start of a line, a return type (no "(": the first name before one is the
  # function's, not an __attribute__ after its parameters), then <name>( ... ;
  string(REGEX MATCHALL "\n[A-Za-z_][^;{}#()]*[ *]${nameRe}[ \t]*\\(" ds "${text}")
  set(names)
  set(decls)
  foreach(d ${ds})
    if(d MATCHES "^\ntypedef[ \t]")
      continue()
    endif()
    string(REGEX MATCH "${nameRe}[ \t]*\\($" name "${d}")
    string(REGEX REPLACE "[ \t]*\\($" "" name "${name}")
    relay_not_a_function("${name}" skip)
    if(skip)
      continue()
    endif()
    list(APPEND names ${name})
    list(APPEND decls "${d}")
  endforeach()
  set(${outNames} ${names} PARENT_SCOPE)
  set(${outDecls} ${decls} PARENT_SCOPE)
endfunction()

# relay_header_data(<header> <out names>): the data a header declares extern (tables), by name: one
# declarator per declaration, on one line, as this project writes them.
function(relay_header_data h outNames)
  relay_source_text(${h} text)
  # Array bounds go first (they hold no name), then ";" is "@" (relay_source_text says why).
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
