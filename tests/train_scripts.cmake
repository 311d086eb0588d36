# Whole-program checks of xgrad-train: memory over a long run, and a checkpoint that survives SIGKILL.
if(TARGET xgrad-train)
  # Not in the sanitizer build: AddressSanitizer's quarantine holds freed memory on purpose, so the
  # resident size grows there whatever the program does.
  if(NOT XGRAD_SANITIZE)
    add_test(NAME soak_memory
      COMMAND ${CMAKE_CURRENT_LIST_DIR}/soak_memory.sh $<TARGET_FILE:xgrad-train> ${CMAKE_CURRENT_BINARY_DIR}/soak_memory)
    set_tests_properties(soak_memory PROPERTIES TIMEOUT 600)
  endif()
  add_test(NAME checkpoint_kill
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/checkpoint_kill.sh $<TARGET_FILE:xgrad-train> $<TARGET_FILE:xgrad-sample>
            ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_kill)
  # COST: one of the suite's longest single-core tests (20 kills, about 10 s) starts early, with
  # hostile_files, so that it does not end the suite alone (tests/hostile.cmake).
  set_tests_properties(checkpoint_kill PROPERTIES TIMEOUT 600 COST 1000)
  xgrad_not_under_sanitizers(checkpoint_kill)  # training runs killed inside their writes
endif()
