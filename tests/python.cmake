# The Python package's tests (tests/python, pytest), run by `make test` with the C suite. A virtual
# environment in the build folder (venv/, reused when present) gets torch and numpy from the package
# registry the first time (~80 s, ~5 GB; pip keeps its cache). The in-tree suite loads this build's
# librelaycc.so through RELAYCC_LIBRARY; python_install does a real `pip install .` of the repository.
find_package(Python3 3.9 COMPONENTS Interpreter)
if(RELAY_SANITIZE)
  # An ASan-instrumented librelaycc.so cannot load into a Python that is not (the runtime must come first
  # in the process): `make asan` covers the C library through the C tests; the Python layer runs in
  # `make test`.
  message(STATUS "relaycc: sanitizer build: the Python tests are not registered")
elseif(Python3_FOUND)
  set(RELAY_PY_SH ${CMAKE_CURRENT_LIST_DIR}/python/run.sh)
  set(RELAY_VENV ${CMAKE_BINARY_DIR}/venv)
  add_test(NAME python_venv COMMAND sh ${RELAY_PY_SH} venv ${Python3_EXECUTABLE} ${RELAY_VENV})
  set_tests_properties(python_venv PROPERTIES TIMEOUT 1200 LABELS cpu FIXTURES_SETUP relay_venv)
  # One CTest entry per test module: the modules run in parallel under ctest -j, each with its own pool.
  file(GLOB RELAY_PY_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/python/test_*.py)
  foreach(t ${RELAY_PY_TESTS})
    get_filename_component(name ${t} NAME_WE)
    add_test(NAME python_${name} COMMAND sh ${RELAY_PY_SH} pytest ${RELAY_VENV} $<TARGET_FILE:relaycc_shared> ${t})
    set_tests_properties(python_${name} PROPERTIES TIMEOUT 900 LABELS cpu FIXTURES_REQUIRED relay_venv)
  endforeach()
  add_test(NAME python_install COMMAND sh ${RELAY_PY_SH} install ${RELAY_VENV} ${CMAKE_SOURCE_DIR})
  set_tests_properties(python_install PROPERTIES TIMEOUT 900 LABELS cpu FIXTURES_REQUIRED relay_venv
                       RUN_SERIAL TRUE)
else()
  message(STATUS "relaycc: no Python 3 interpreter: the Python tests are not registered")
endif()
