# Every example parses its command line as the tools do: --help prints the usage, exits 0 and creates
# nothing; an unknown flag is one line on stderr and exit status 2.
foreach(example mha_demo gpt_demo gpt_gradcheck byte_mlp train_tiny)
  if(TARGET ${example})
    add_test(NAME examples_cli_${example}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/examples_cli.sh $<TARGET_FILE:${example}>)
  endif()
endforeach()
