# Every fuzz target (fuzz/targets.cmake) replayed by the normal build, no clang needed: the inputs that
# once found a bug (fuzz/regressions/<name>) and the seed corpus (fuzz/corpus/<name>). A target links
# xgrad::core unless it is in XGRAD_FUZZ_NEEDS_TRAIN (then xgrad, and not with XGRAD_BUILD_TRAIN=OFF).
include(${PROJECT_SOURCE_DIR}/fuzz/targets.cmake)
# The replaying main (fuzz/replay.cpp), compiled once for every target. (The programs get
# XGRAD_PROGRAM_OPTIONS from tests/CMakeLists.txt; an object library does not.)
add_library(xgrad_fuzz_replay_main OBJECT ${PROJECT_SOURCE_DIR}/fuzz/replay.cpp)
target_compile_options(xgrad_fuzz_replay_main PRIVATE ${XGRAD_PROGRAM_OPTIONS})
foreach(name ${XGRAD_FUZZ_TARGETS})
  xgrad_library_for(library ${name} ${XGRAD_FUZZ_NEEDS_TRAIN})
  if(NOT library)
    continue()
  endif()
  # The target's extra sources are tools' command lines, compiled once (tools/command_lines.cmake).
  set(command_lines "")
  foreach(source ${XGRAD_FUZZ_SOURCES_${name}})
    xgrad_command_line_library(command_line ${source})
    list(APPEND command_lines ${command_line})
  endforeach()
  add_executable(fuzz_replay_${name} ${PROJECT_SOURCE_DIR}/fuzz/${name}.cpp)
  target_link_libraries(fuzz_replay_${name} PRIVATE xgrad_fuzz_replay_main ${command_lines} ${library})
  add_test(NAME fuzz_replay_${name} COMMAND fuzz_replay_${name}
    ${PROJECT_SOURCE_DIR}/fuzz/regressions/${name} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name})
endforeach()
