# `cmake --install` then find_package(xgrad) from a separate project. Not in a sanitizer build: the
# consumer is built without the sanitizers and cannot link an instrumented library.
if(NOT XGRAD_SANITIZE)
  add_test(NAME install_find_package
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install_test.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
endif()
