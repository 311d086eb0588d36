# The Python module's tests (tests/python/, pytest), run by ctest with the module just built, when it was
# built (python/CMakeLists.txt says why it may not be: no pybind11, or a sanitizer build). They need
# NumPy and pytest, never torch: PyTorch's numbers are committed fixtures (tests/python/make_fixtures.py).
if(TARGET xgrad_python)
  add_test(NAME python_pytest
    COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(python_pytest PROPERTIES
    ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;XGRAD_SOURCE_DIR=${PROJECT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1"
    TIMEOUT 600)
endif()
