# Every fuzz target (fuzz/targets.cmake) replayed by the normal build, no clang needed: the inputs that
# once found a bug (fuzz/regressions/<name>) and the seed corpus (fuzz/corpus/<name>). A target links
# xgrad::core unless it is in XGRAD_FUZZ_NEEDS_TRAIN (then xgrad, and not with XGRAD_BUILD_TRAIN=OFF).
include(${PROJECT_SOURCE_DIR}/fuzz/targets.cmake)
find_package(CLI11 REQUIRED)  # xgrad-gpt-npy's command line
foreach(name ${XGRAD_FUZZ_TARGETS})
  xgrad_library_for(library ${name} ${XGRAD_FUZZ_NEEDS_TRAIN})
  if(NOT library)
    continue()
  endif()
  set(extra "")
  foreach(source ${XGRAD_FUZZ_SOURCES_${name}})
    list(APPEND extra ${PROJECT_SOURCE_DIR}/${source})
  endforeach()
  add_executable(fuzz_replay_${name} ${PROJECT_SOURCE_DIR}/fuzz/${name}.cpp ${PROJECT_SOURCE_DIR}/fuzz/replay.cpp
    ${extra})
  target_link_libraries(fuzz_replay_${name} PRIVATE ${library} CLI11::CLI11)
  target_compile_options(fuzz_replay_${name} PRIVATE -Wall -Wextra)
  add_test(NAME fuzz_replay_${name} COMMAND fuzz_replay_${name}
    ${PROJECT_SOURCE_DIR}/fuzz/regressions/${name} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name})
endforeach()
