# Data-parallel training under Open MPI (tests/mpi_equivalence.sh), when xgrad was built with MPI.
if(XGRAD_WITH_MPI AND TARGET xgrad-train)
  find_program(XGRAD_MPIRUN mpirun)
endif()
if(XGRAD_MPIRUN AND XGRAD_WITH_MPI AND TARGET xgrad-train)
  add_test(NAME mpi_equivalence
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/mpi_equivalence.sh $<TARGET_FILE:xgrad-train> ${CMAKE_CURRENT_BINARY_DIR}/mpi_equivalence)
  # Both cores, first: as experiment_mpi (tests/experiment_mpi.cmake).
  set_tests_properties(mpi_equivalence PROPERTIES TIMEOUT 300 PROCESSORS 2 COST 2000)
  # In the sanitizer build the MPI run keeps AddressSanitizer and UBSan but not leak detection: Open MPI
  # keeps allocations until exit by design, some in plugins it has unloaded (frames no suppression can
  # name). xgrad's own leaks are covered by every other test, the single-process training ones included.
  if(XGRAD_SANITIZE)
    set_tests_properties(mpi_equivalence PROPERTIES ENVIRONMENT "ASAN_OPTIONS=abort_on_error=1:detect_leaks=0")
  endif()
endif()
