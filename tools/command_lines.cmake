# The tools' command-line parsers (tools/*_args.cpp), compiled once for everything that uses them: the
# tools, their tests and the fuzz targets' replays (tests/fuzz_replay.cmake finds the library of a source
# of fuzz/targets.cmake through xgrad_command_line_library). Before, every user compiled its parser again:
# tools/train_args.cpp four times at 8 CPU s each, most of it CLI11's header.
#
# They are two libraries, each one translation unit with XGRAD_UNITY_BUILD (cmake/one_unit.cmake), so
# that CLI11's header, several CPU seconds of every unit that includes it, is compiled twice in all and in
# no tool (docs/performance.md, "CLI11 compiled three times, not eleven"): xgrad_command_lines_core on
# xgrad::core, which stays buildable with XGRAD_BUILD_TRAIN=OFF for the replays of the core's fuzz
# targets, and xgrad_command_lines_train on xgrad (train/). A program that links a library gets the whole
# unit: xgrad-mha-npy carries gpt_npy_args' parser too. Built only when something links them.
find_package(CLI11 REQUIRED)

# Each parser's library, stated once: XGRAD_COMMAND_LINES_<group> lists the files of
# xgrad_command_lines_<group>.
set(XGRAD_COMMAND_LINES_core
  mha_npy_args.cpp      # xgrad-mha-npy (no CLI11)
  gpt_npy_args.cpp)     # xgrad-gpt-npy
set(XGRAD_COMMAND_LINES_train
  train_args.cpp        # xgrad-train and xgrad-sample
  convert_args.cpp      # xgrad-convert
  experiment_args.cpp)  # xgrad-experiment

# xgrad_command_line_library(VAR SOURCE): VAR = the name of the library that holds SOURCE (tools/NAME.cpp,
# or NAME.cpp).
function(xgrad_command_line_library var source)
  get_filename_component(file ${source} NAME)
  foreach(group core train)
    if(file IN_LIST XGRAD_COMMAND_LINES_${group})
      set(${var} xgrad_command_lines_${group} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "${source}: not a parser of tools/command_lines.cmake")
endfunction()

# xgrad_command_lines(GROUP LIBRARY): xgrad_command_lines_GROUP, the parsers of GROUP on LIBRARY. Their
# headers do not include CLI11, so neither does what links them.
function(xgrad_command_lines group library)
  set(sources ${XGRAD_COMMAND_LINES_${group}})
  list(TRANSFORM sources PREPEND ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/)
  if(XGRAD_UNITY_BUILD)
    xgrad_one_unit(sources command_lines_${group} ${sources})
  endif()
  add_library(xgrad_command_lines_${group} STATIC EXCLUDE_FROM_ALL ${sources})
  target_link_libraries(xgrad_command_lines_${group} PUBLIC ${library} PRIVATE CLI11::CLI11)
  target_compile_options(xgrad_command_lines_${group} PRIVATE ${XGRAD_PROGRAM_OPTIONS})
endfunction()

xgrad_command_lines(core xgrad::core)
if(XGRAD_BUILD_TRAIN)
  xgrad_command_lines(train xgrad)
endif()
