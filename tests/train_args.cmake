# xgrad-train's command line (tools/train_args.cpp, in its parsers' library, tools/command_lines.cmake): its
# flags against the option fields the library's errors name (tests/train_args_test.cpp).
xgrad_command_line_library(train_args train_args.cpp)
if(TARGET ${train_args})
  add_executable(train_args_test ${CMAKE_CURRENT_LIST_DIR}/train_args_test.cpp)
  target_link_libraries(train_args_test PRIVATE ${train_args} xgrad_doctest)
  add_test(NAME train_args COMMAND train_args_test)
endif()
