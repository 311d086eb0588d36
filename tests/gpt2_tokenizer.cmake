# GPT-2's tokenizer through the tools (tests/gpt2_tokenizer_tools.py): a tiny random Hugging Face GPT-2
# with the test vocabulary converts, samples words from a prompt and converts back byte-identical;
# xgrad-train --tokenizer gpt2:DIR; bad folders refused.
if(TARGET xgrad-convert AND TARGET xgrad-sample AND TARGET xgrad-train)
  add_test(NAME gpt2_tokenizer_tools
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/gpt2_tokenizer_tools.py
            $<TARGET_FILE_DIR:xgrad-convert> ${CMAKE_CURRENT_BINARY_DIR}/gpt2_tokenizer_tools)
  set_tests_properties(gpt2_tokenizer_tools PROPERTIES TIMEOUT 300)
endif()
# The speed of GPT-2's tokenizer beside SentencePiece's (bench/tokenizer_speed.cpp): a program to run by
# hand (docs/tokenizers.md), not a test; its flags through the examples' command line (examples/).
if(TARGET xgrad AND TARGET xgrad_example_command_line)
  add_executable(tokenizer_speed ${PROJECT_SOURCE_DIR}/bench/tokenizer_speed.cpp)
  target_link_libraries(tokenizer_speed PRIVATE xgrad xgrad_test_source_dir xgrad_example_command_line)
endif()
