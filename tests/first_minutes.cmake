# tools/first_minutes.sh (./dev first-minutes) on small repositories whose ./dev only returns at once: its
# report, verdicts and refusals, in a second. Its real run builds everything twice from scratch, minutes
# (docs/performance.md).
find_program(XGRAD_GIT git)
if(XGRAD_GIT)
  add_test(NAME first_minutes
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/first_minutes_test.sh ${CMAKE_CURRENT_BINARY_DIR}/first_minutes)
  set_tests_properties(first_minutes PROPERTIES TIMEOUT 60)
  xgrad_not_under_sanitizers(first_minutes)  # it runs shell scripts and git, no program of the build
endif()
