# The C++ half of the course's assignment 3 (course/assignments/cpp/a3_mha_backward.cpp), built twice: with
# the library's own hand-derived backward as the solution, which must pass, and as students get it, which
# must say it is not implemented yet.
set(XGRAD_COURSE_A3 ${PROJECT_SOURCE_DIR}/course/assignments/cpp/a3_mha_backward.cpp)
foreach(variant reference stub)
  add_executable(course_a3_${variant} ${XGRAD_COURSE_A3})
  target_link_libraries(course_a3_${variant} PRIVATE xgrad::core)
  add_test(NAME course_a3_${variant} COMMAND course_a3_${variant})
endforeach()
target_compile_definitions(course_a3_reference PRIVATE XGRAD_COURSE_REFERENCE)
set_tests_properties(course_a3_reference PROPERTIES PASS_REGULAR_EXPRESSION "^PASS 3.2 mha_backward \\(C\\+\\+\\)")
set_tests_properties(course_a3_stub PROPERTIES
  PASS_REGULAR_EXPRESSION "^FAIL 3.2 mha_backward \\(C\\+\\+\\): not implemented yet")
