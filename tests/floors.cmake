# The floors of src/ (CONTRIBUTING.md "Floors"): no file includes a header of a floor above its own, and
# every function is declared on the floor that defines it.
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
# A function is declared on the floor that defines it: the tree with plan/plan.h declaring relayPlanBuild
# (defined with the route table, floor 3), as it once did, must be refused.
add_test(NAME floors_check_fails_decl
         COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_SOURCE_DIR} -DINJECT_DECL=plan/plan.h:relayPlanBuild
                 -P ${CMAKE_SOURCE_DIR}/cmake/CheckFloors.cmake)
set_tests_properties(floors_check_fails_decl PROPERTIES LABELS cpu TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "src/plan/plan.h \\(floor 1\\) declares relayPlanBuild, which")
