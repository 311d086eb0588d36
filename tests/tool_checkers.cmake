# The tools' checkers: doctest programs that run a tool as a user runs it, each file one ctest test. Listed
# as the test's name, the file (tests/FILE.cpp) and the tool it runs; a checker whose tool is not built
# (XGRAD_BUILD_TRAIN=OFF: no xgrad-convert) is left out. With XGRAD_UNITY_BUILD they compile as one
# translation unit, the program tool_checkers, which each test runs with doctest's --source-file filter, as
# the test_*.cpp groups do (tests/CMakeLists.txt); each file keeps its code in a namespace named after it.
set(XGRAD_TOOL_CHECKERS
  tool_cli         tool_cli_test         xgrad-mha-npy
  gpt_tool         gpt_tool_test         xgrad-gpt-npy
  gpt_variant_tool gpt_variant_tool_test xgrad-gpt-npy
  convert_tool     convert_tool_test     xgrad-convert)
set(XGRAD_CHECKERS_NEEDING_TRAIN convert_tool_test)  # it includes a train/ header

set(sources "")
set(tools "")
set(group_library xgrad::core)
set(checkers ${XGRAD_TOOL_CHECKERS})
while(checkers)
  list(POP_FRONT checkers test file tool)
  if(NOT TARGET ${tool})
    continue()
  endif()
  xgrad_library_for(library ${file} ${XGRAD_CHECKERS_NEEDING_TRAIN})
  set(source ${CMAKE_CURRENT_LIST_DIR}/${file}.cpp)
  xgrad_test_program(${file} ${library} ${source})
  add_dependencies(${file} ${tool})
  if(XGRAD_UNITY_BUILD)
    set_target_properties(${file} PROPERTIES EXCLUDE_FROM_ALL ON)
    add_test(NAME ${test} COMMAND tool_checkers --source-file=*/${file}.cpp)
    set_tests_properties(${test} PROPERTIES FAIL_REGULAR_EXPRESSION "test cases: *0 [|]")
    list(APPEND sources ${source})
    list(APPEND tools ${tool})
    if(library STREQUAL xgrad)
      set(group_library xgrad)
    endif()
  else()
    add_test(NAME ${test} COMMAND ${file})
  endif()
endwhile()
if(sources)
  xgrad_write_unit(${CMAKE_CURRENT_BINARY_DIR}/tool_checkers.cpp ${sources})
  xgrad_test_program(tool_checkers ${group_library} ${CMAKE_CURRENT_BINARY_DIR}/tool_checkers.cpp)
  list(REMOVE_DUPLICATES tools)
  add_dependencies(tool_checkers ${tools})
endif()
if(TEST gpt_variant_tool)
  xgrad_not_under_sanitizers(gpt_variant_tool)  # numbers against fixtures; gpt_tool keeps the refusals
endif()
