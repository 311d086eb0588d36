# The xgrad-gpt-npy command-line checks (tests/gpt_tool_test.cpp): a doctest program that runs the tool.
if(TARGET xgrad-gpt-npy)
  add_executable(gpt_tool_test ${CMAKE_CURRENT_LIST_DIR}/gpt_tool_test.cpp)
  target_link_libraries(gpt_tool_test PRIVATE xgrad::core xgrad_doctest xgrad_test_source_dir)
  add_dependencies(gpt_tool_test xgrad-gpt-npy)
  add_test(NAME gpt_tool COMMAND gpt_tool_test)
endif()
