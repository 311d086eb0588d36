# xgrad-train's command line with the architecture variants (tests/train_cli.sh).
if(TARGET xgrad-train)
  add_test(NAME train_cli
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/train_cli.sh $<TARGET_FILE:xgrad-train> $<TARGET_FILE:xgrad-sample>
            ${CMAKE_CURRENT_BINARY_DIR}/train_cli)
  set_tests_properties(train_cli PROPERTIES TIMEOUT 300)
  xgrad_not_under_sanitizers(train_cli)  # a training run per variant
endif()
