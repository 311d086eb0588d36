# The tools' command-line parsers (tools/*_args.cpp), each a library compiled once for everything that
# uses it: its tool, its test and its fuzz target's replay (tests/fuzz_replay.cmake finds the library of
# a source of fuzz/targets.cmake through xgrad_command_line_library). Before, every user compiled the
# file again: tools/train_args.cpp four times at 8 CPU s each, most of it CLI11's header.
# Built only when something links them; xgrad_train_args needs the xgrad library (train/).
find_package(CLI11 REQUIRED)

# xgrad_command_line_library(VAR SOURCE): VAR = the name of SOURCE's library, xgrad_<its file's stem>.
function(xgrad_command_line_library var source)
  get_filename_component(stem ${source} NAME_WE)
  set(${var} xgrad_${stem} PARENT_SCOPE)
endfunction()

# xgrad_command_line(SOURCE LIBRARY): the library of tools/SOURCE, on LIBRARY.
function(xgrad_command_line source library)
  xgrad_command_line_library(name ${source})
  add_library(${name} STATIC EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/${source})
  target_link_libraries(${name} PUBLIC ${library} CLI11::CLI11)
  target_compile_options(${name} PRIVATE ${XGRAD_PROGRAM_OPTIONS})
endfunction()

xgrad_command_line(mha_npy_args.cpp xgrad::core)  # xgrad-mha-npy
xgrad_command_line(gpt_npy_args.cpp xgrad::core)  # xgrad-gpt-npy
if(XGRAD_BUILD_TRAIN)
  xgrad_command_line(train_args.cpp xgrad)         # xgrad-train and xgrad-sample
endif()
