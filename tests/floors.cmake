# The floors of src/ (CONTRIBUTING.md "Floors"): no file includes a header of a floor above its own.
add_test(NAME floors_check COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_SOURCE_DIR}
                                   -P ${CMAKE_SOURCE_DIR}/cmake/CheckFloors.cmake)
set_tests_properties(floors_check PROPERTIES LABELS cpu TIMEOUT 60)
# The check can fail: the same tree with one upward include (the shm transport reading core's header)
# must be refused, naming the file, the header and both floors.
add_test(NAME floors_check_fails
         COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_SOURCE_DIR} -DINJECT=transport/shm/ops.c:core/init.h
                 -P ${CMAKE_SOURCE_DIR}/cmake/CheckFloors.cmake)
set(RELAY_FLOORS_REFUSED "src/transport/shm/ops.c \\(floor 2\\) includes core/init.h \\(floor 4\\)")
set_tests_properties(floors_check_fails PROPERTIES LABELS cpu TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "${RELAY_FLOORS_REFUSED}")
