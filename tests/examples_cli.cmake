# Every example parses its command line as the tools do: --help prints the usage, exits 0 and creates
# nothing; an unknown flag is one line on stderr and exit status 2.
foreach(example mha_demo gpt_demo gpt_gradcheck byte_mlp train_tiny gpt_step_profile)
  if(TARGET ${example})
    add_test(NAME examples_cli_${example}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/examples_cli.sh $<TARGET_FILE:${example}>)
  endif()
endforeach()
# A count refuses a negative number (examples/command_line.hpp), where CLI11 alone would read "-1" into an
# unsigned option as 2^64 - 1; a rule on an option is CLI11's own message. Both before any file is read.
if(TARGET byte_mlp)
  add_test(NAME examples_cli_negative_count COMMAND byte_mlp --data missing.txt --out out --width -1)
  set_tests_properties(examples_cli_negative_count PROPERTIES
    PASS_REGULAR_EXPRESSION "^byte_mlp: --width: must be a count >= 0, got '-1' \\(see --help\\)\n$")
endif()
if(TARGET gpt_step_profile)
  add_test(NAME examples_cli_out_of_range COMMAND gpt_step_profile --steps 3)
  set_tests_properties(examples_cli_out_of_range PROPERTIES
    PASS_REGULAR_EXPRESSION "^gpt_step_profile: --steps: Value 3 not in range 4 to 1000000 \\(see --help\\)\n$")
endif()

# The profiling driver runs its steps and reports a median (docs/performance.md uses it under perf).
if(TARGET gpt_step_profile)
  add_test(NAME examples_run_gpt_step_profile COMMAND gpt_step_profile --config nano --steps 4 --peak 50)
  set_tests_properties(examples_run_gpt_step_profile PROPERTIES
    PASS_REGULAR_EXPRESSION "loss at step 1 4\\.[0-9]+.*median of 1 steps: wall [0-9.]+ ms.*share of the given FMA peak"
    FAIL_REGULAR_EXPRESSION "Sanitizer|runtime error")  # the pass regex alone ignores the exit status
endif()

# The demo writes its graph into a folder of any name, and renders it when Graphviz is there: a folder
# named with a single quote, a space and a dollar sign, which a shell would take apart if the paths were
# spliced into its command (tests/examples_mha_demo_folder.sh).
if(TARGET mha_demo)
  add_test(NAME examples_run_mha_demo
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/examples_mha_demo_folder.sh $<TARGET_FILE:mha_demo>)
endif()
