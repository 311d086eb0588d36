# Data-parallel training under Open MPI (tests/mpi_equivalence.sh), when xgrad was built with MPI.
find_program(XGRAD_MPIRUN mpirun)
if(XGRAD_WITH_MPI AND XGRAD_MPIRUN AND TARGET xgrad-train)
  add_test(NAME mpi_equivalence
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/mpi_equivalence.sh $<TARGET_FILE:xgrad-train> ${CMAKE_CURRENT_BINARY_DIR}/mpi_equivalence)
  set_tests_properties(mpi_equivalence PROPERTIES TIMEOUT 300 PROCESSORS 2)
  if(XGRAD_SANITIZE)  # Open MPI's own allocations live until exit: not xgrad's leaks
    set_tests_properties(mpi_equivalence PROPERTIES
      ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan_mpi.supp:print_suppressions=0")
  endif()
endif()
