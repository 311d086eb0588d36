# The xgrad-mha-npy command-line checks (tests/tool_cli_test.cpp): a doctest program that runs the tool.
if(TARGET xgrad-mha-npy)
  add_executable(tool_cli_test ${CMAKE_CURRENT_LIST_DIR}/tool_cli_test.cpp)
  target_link_libraries(tool_cli_test PRIVATE xgrad::core xgrad_doctest xgrad_test_source_dir)
  add_dependencies(tool_cli_test xgrad-mha-npy)
  add_test(NAME tool_cli COMMAND tool_cli_test)
endif()
