# xgrad-train's command line as a library (tools/train_args.cpp): its flags against the option fields the
# library's errors name (tests/train_args_test.cpp).
if(TARGET xgrad_train_args)
  add_executable(train_args_test ${CMAKE_CURRENT_LIST_DIR}/train_args_test.cpp)
  target_link_libraries(train_args_test PRIVATE xgrad_train_args xgrad_doctest)
  add_test(NAME train_args COMMAND train_args_test)
endif()
