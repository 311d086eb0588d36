# The Python module's tests, when the module was built (python/CMakeLists.txt says why it may not be: no
# pybind11, or a sanitizer build). python_pytest runs tests/python/ (pytest) against the module just built;
# it needs NumPy and pytest, never torch (PyTorch's numbers are committed fixtures made by
# tests/python/make_fixtures.py). python_install installs the package and imports it from outside.
if(TARGET xgrad_python)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import pytest" RESULT_VARIABLE XGRAD_PYTEST_MISSING
    OUTPUT_QUIET ERROR_QUIET)
  if(XGRAD_PYTEST_MISSING)
    message(STATUS "xgrad: Python tests: not run (${Python3_EXECUTABLE} cannot import pytest: python3-pytest)")
  endif()
endif()
if(TARGET xgrad_python AND NOT XGRAD_PYTEST_MISSING)
  add_test(NAME python_pytest
    COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(python_pytest PROPERTIES
    ENVIRONMENT
    "PYTHONPATH=${PROJECT_BINARY_DIR}/python;XGRAD_SOURCE_DIR=${PROJECT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1"
    TIMEOUT 600)
endif()
if(TARGET xgrad_python)
  add_test(NAME python_install
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python_install.sh ${PROJECT_BINARY_DIR} ${Python3_EXECUTABLE})
endif()
