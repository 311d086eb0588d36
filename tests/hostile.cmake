# The hostile-file corpus (tests/hostile/, made by tests/hostile/make_hostile.py): every tool on every
# file, each run watched for resident memory (killed past 1 GiB) and time (killed past a few seconds).
# The tools get a 1 GiB budget (XGRAD_MAX_MEMORY), so that inputs whose work would need more are refused.
if(TARGET xgrad-gpt-npy AND TARGET xgrad-mha-npy AND TARGET xgrad-train AND TARGET xgrad-sample AND
   TARGET xgrad-convert AND TARGET xgrad-experiment)
  add_test(NAME hostile_files COMMAND ${CMAKE_CURRENT_LIST_DIR}/hostile/replay.sh
    $<TARGET_FILE_DIR:xgrad-gpt-npy> ${CMAKE_CURRENT_BINARY_DIR}/hostile_files)
  # COST: one of the suite's longest tests (334 tool runs) starts early, right after the two MPI tests, so
  # that it does not end the suite alone on one core while the other waits (ctest orders by COST; a fresh
  # build has no timings yet).
  set_tests_properties(hostile_files PROPERTIES ENVIRONMENT "XGRAD_MAX_MEMORY=1G" TIMEOUT 600 COST 1000)
endif()
