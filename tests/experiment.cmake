# Exercise 20.1's experiment pipeline (examples/heads_experiment.cpp) in its --quick form.
if(TARGET heads_experiment)
  add_test(NAME heads_experiment_quick
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/heads_experiment_quick.sh $<TARGET_FILE:heads_experiment>
            ${CMAKE_CURRENT_BINARY_DIR}/heads_experiment_quick)
  set_tests_properties(heads_experiment_quick PROPERTIES TIMEOUT 300)
endif()
