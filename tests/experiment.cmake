# xgrad-experiment, the grid runner (tools/xgrad_experiment.cpp): Exercise 20.1's spec in its --quick
# form, resuming after the runner is killed with SIGKILL, and the refusal of bad specs before any run.
if(TARGET xgrad-experiment AND TARGET xgrad-train)
  foreach(check quick resume refusal)
    add_test(NAME experiment_${check}
      COMMAND ${CMAKE_CURRENT_LIST_DIR}/experiment_${check}.sh $<TARGET_FILE:xgrad-experiment>
              ${PROJECT_SOURCE_DIR}/docs/experiments ${CMAKE_CURRENT_BINARY_DIR}/experiment_${check})
    set_tests_properties(experiment_${check} PROPERTIES TIMEOUT 300)
  endforeach()
  xgrad_not_under_sanitizers(experiment_resume)  # a grid killed and resumed; experiment_quick stays
endif()
