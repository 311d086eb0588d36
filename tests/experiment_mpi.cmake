# A grid shared by the processes of `mpirun -np 2 xgrad-experiment` (tests/experiment_mpi.sh), killed and
# resumed, reporting what one process reports; when xgrad was built with MPI.
if(XGRAD_WITH_MPI AND TARGET xgrad-experiment AND TARGET xgrad-train)
  find_program(XGRAD_MPIRUN mpirun)
endif()
if(XGRAD_MPIRUN AND XGRAD_WITH_MPI AND TARGET xgrad-experiment AND TARGET xgrad-train)
  add_test(NAME experiment_mpi
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/experiment_mpi.sh $<TARGET_FILE:xgrad-experiment>
            ${CMAKE_CURRENT_BINARY_DIR}/experiment_mpi)
  # It takes both cores (PROCESSORS 2), which ctest frees only at the start or the end: COST puts it first.
  set_tests_properties(experiment_mpi PROPERTIES TIMEOUT 300 PROCESSORS 2 COST 2000)
  xgrad_not_under_sanitizers(experiment_mpi)  # a grid of training runs, killed and resumed
  if(XGRAD_SANITIZE)  # as tests/mpi.cmake: Open MPI keeps allocations until exit by design
    set_tests_properties(experiment_mpi PROPERTIES ENVIRONMENT "ASAN_OPTIONS=abort_on_error=1:detect_leaks=0")
  endif()
endif()
