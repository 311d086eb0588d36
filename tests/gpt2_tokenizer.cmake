# GPT-2's tokenizer through the tools (tests/gpt2_tokenizer_tools.py): a tiny random Hugging Face GPT-2
# with the test vocabulary converts, samples words from a prompt and converts back byte-identical;
# xgrad-train --tokenizer gpt2:DIR; bad folders refused.
if(TARGET xgrad-convert AND TARGET xgrad-sample AND TARGET xgrad-train)
  add_test(NAME gpt2_tokenizer_tools
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/gpt2_tokenizer_tools.py $<TARGET_FILE_DIR:xgrad-convert>
            ${CMAKE_CURRENT_BINARY_DIR}/gpt2_tokenizer_tools)
  set_tests_properties(gpt2_tokenizer_tools PROPERTIES TIMEOUT 300)
endif()
