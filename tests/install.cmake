# `cmake --install` then find_package(xgrad) from a separate project.
add_test(NAME install_find_package
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install_test.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
