# cmake -DROOT=<a source tree> [-DINJECT=<file>:<header>] -P CheckFloors.cmake
# The floors of src/ (CONTRIBUTING.md "Floors"): a file may include headers of its own floor and of the
# floors below it, never one above. Every file under ROOT/src (.c .h .cu .cuh) is read; each
# `#include "dir/name.h"` that names a file of src/ is judged by the floors of both paths. A file of
# src/ that no floor rule matches is an error too, so a new folder gets its floor on purpose.
# A function is declared on the floor that defines it: a header of floor 1 declaring what a file of floor
# 3 defines is a call one floor up that no include shows (relayPlanBuild in plan/plan.h once).
# INJECT (the check's own test, floors_check_fails): read <file> (relative to src/) as if it also
# included <header>, to prove that a bad include fails the check. INJECT_DECL=<header>:<function>
# (floors_check_fails_decl): read <header> as if it also declared <function>.
cmake_policy(VERSION 3.18)
include(${CMAKE_CURRENT_LIST_DIR}/HeaderFunctions.cmake)
if(NOT ROOT OR NOT IS_DIRECTORY "${ROOT}/src")
  message(FATAL_ERROR "CheckFloors: ROOT (${ROOT}) holds no src/")
endif()

# Path prefixes (relative to src/) and their floor, most specific first: the first that matches wins.
set(RELAY_FLOORS
    "shim/=5"
    "core/=4"
    "route/=3" "exec/=3"
    "transport/shm/=2" "transport/nccl/=2" "transport/shm.h=2" "transport/nccl.h=2"
    "sim/=2" "ref/=2"
    "plan/=1" "topo/=1" "p2p/=1"
    "comm/=0" "reduce_host.=0" "float16.h=0" "gpu_port.h=0")

function(floor_of path out)
  foreach(rule ${RELAY_FLOORS})
    string(REGEX MATCH "^(.*)=([0-9]+)$" m "${rule}")
    set(prefix "${CMAKE_MATCH_1}")
    set(level "${CMAKE_MATCH_2}")
    string(LENGTH "${prefix}" n)
    string(SUBSTRING "${path}" 0 ${n} head)
    if(head STREQUAL prefix)
      set(${out} ${level} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE files RELATIVE "${ROOT}/src" "${ROOT}/src/*.c" "${ROOT}/src/*.h" "${ROOT}/src/*.cu"
     "${ROOT}/src/*.cuh")
list(SORT files)
set(bad 0)
set(nIncludes 0)
foreach(f ${files})
  floor_of("${f}" mine)
  if(mine STREQUAL "")
    message(SEND_ERROR "src/${f} is on no floor (add its folder to RELAY_FLOORS and CONTRIBUTING.md)")
    math(EXPR bad "${bad} + 1")
    continue()
  endif()
  file(STRINGS "${ROOT}/src/${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  if(INJECT MATCHES "^${f}:(.+)$")
    list(APPEND lines "#include \"${CMAKE_MATCH_1}\"")
  endif()
  foreach(l ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*$" "\\1" inc "${l}")
    if(NOT EXISTS "${ROOT}/src/${inc}")
      continue() # a header of include/, the generated ones, CUDA's, NCCL's, or one beside the file
    endif()
    math(EXPR nIncludes "${nIncludes} + 1")
    floor_of("${inc}" theirs)
    if(theirs STREQUAL "")
      continue() # reported as a file of its own
    endif()
    if(theirs GREATER mine)
      message(SEND_ERROR "src/${f} (floor ${mine}) includes ${inc} (floor ${theirs}): a lower floor includes "
                         "a higher one")
      math(EXPR bad "${bad} + 1")
    endif()
  endforeach()
endforeach()
# Declared where defined: the non-static functions each .c/.cu file defines, then each header's declarations.
set(nDefs 0)
foreach(f ${files})
  if(NOT f MATCHES "\\.(c|cu)$")
    continue()
  endif()
  relay_source_text("${ROOT}/src/${f}" text)
  string(REGEX REPLACE "[][]" "" text "${text}")
  string(REPLACE ";" "@" text "${text}")
  # <return type> <name>(<parameters>) { at the start of a line; the type holds no "(" or "=".
  string(REGEX MATCHALL "\n[A-Za-z_][^@{}#()=\n]*[ *][A-Za-z_][A-Za-z0-9_]*[ \t]*\\([^@{}]*\\)[ \t\n]*{" ds
         "${text}")
  foreach(d ${ds})
    if(d MATCHES "^\n(static|typedef)[ \t]")
      continue()
    endif()
    string(REGEX MATCH "[A-Za-z_][A-Za-z0-9_]*[ \t]*\\(" name "${d}")
    string(REGEX REPLACE "[ \t]*\\($" "" name "${name}")
    relay_not_a_function("${name}" skip)
    if(skip)
      continue()
    endif()
    set(definedIn_${name} "${f}")
    math(EXPR nDefs "${nDefs} + 1")
  endforeach()
endforeach()
set(nDecls 0)
foreach(f ${files})
  if(NOT f MATCHES "\\.(h|cuh)$")
    continue()
  endif()
  relay_header_functions("${ROOT}/src/${f}" "[A-Za-z_][A-Za-z0-9_]*" names decls)
  if(INJECT_DECL MATCHES "^${f}:(.+)$")
    list(APPEND names ${CMAKE_MATCH_1})
  endif()
  floor_of("${f}" mine)
  foreach(name ${names})
    math(EXPR nDecls "${nDecls} + 1")
    if(NOT DEFINED definedIn_${name})
      continue() # defined in no file of src/ (a static inline, a CUDA or NCCL function)
    endif()
    floor_of("${definedIn_${name}}" theirs)
    if(NOT theirs STREQUAL mine)
      message(SEND_ERROR "src/${f} (floor ${mine}) declares ${name}, which src/${definedIn_${name}} (floor "
                         "${theirs}) defines: declare it on the floor that defines it")
      math(EXPR bad "${bad} + 1")
    endif()
  endforeach()
endforeach()
list(LENGTH files nFiles)
# The readers see what they must: a definition and a declaration known to exist, and a count of each
# (328 and 380 on 2026-12-03) far from none.
if(NOT definedIn_relayPlanBuild STREQUAL "route/table.c" OR NOT definedIn_relaySetError STREQUAL "comm/common.c"
   OR nDefs LESS 100 OR nDecls LESS 100)
  message(FATAL_ERROR "CheckFloors: read ${nDefs} definitions and ${nDecls} declarations in ${nFiles} files, "
                      "relayPlanBuild in '${definedIn_relayPlanBuild}': the reader is broken")
endif()
if(nIncludes LESS 50)
  message(FATAL_ERROR "CheckFloors: read only ${nIncludes} includes of src/ in ${nFiles} files: the reader "
                      "is broken")
endif()
message(STATUS "floors: ${nFiles} files, ${nIncludes} includes of src/, ${nDecls} declarations of ${nDefs} "
               "defined functions, ${bad} problems")
if(bad)
  message(FATAL_ERROR "${bad} problems")
endif()
