# xgrad-train --precision fp32 | bf16 (tests/train_precision_cli.sh).
if(TARGET xgrad-train)
  add_test(NAME train_precision_cli
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/train_precision_cli.sh $<TARGET_FILE:xgrad-train>
            ${CMAKE_CURRENT_BINARY_DIR}/train_precision_cli)
  set_tests_properties(train_precision_cli PROPERTIES TIMEOUT 300)
endif()
