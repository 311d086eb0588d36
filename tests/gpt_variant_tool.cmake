# xgrad-gpt-npy on every GPT variant fixture (tests/gpt_variant_tool_test.cpp): --grad tape and --grad
# manual, float64 and float32, against PyTorch's numbers in tests/data/gpt_variant_fixtures.
if(TARGET xgrad-gpt-npy)
  add_executable(gpt_variant_tool_test ${CMAKE_CURRENT_LIST_DIR}/gpt_variant_tool_test.cpp)
  target_link_libraries(gpt_variant_tool_test PRIVATE xgrad::core xgrad_doctest xgrad_test_source_dir)
  add_dependencies(gpt_variant_tool_test xgrad-gpt-npy)
  add_test(NAME gpt_variant_tool COMMAND gpt_variant_tool_test)
  xgrad_not_under_sanitizers(gpt_variant_tool)  # numbers against fixtures; gpt_tool keeps the refusals
endif()
