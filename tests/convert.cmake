# tools/nanogpt_convert.py, round trip through xgrad's strict reader; skipped where PyTorch is missing.
if(TARGET xgrad-convert)
  add_test(NAME nanogpt_convert
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/nanogpt_convert_test.py $<TARGET_FILE:xgrad-convert>
            ${CMAKE_CURRENT_BINARY_DIR}/nanogpt_convert)
  set_tests_properties(nanogpt_convert PROPERTIES SKIP_RETURN_CODE 77)
endif()
# xgrad-sample through a SentencePiece checkpoint: a prompt it cannot encode is one line, exit 2.
if(TARGET xgrad-train AND TARGET xgrad-sample)
  add_test(NAME sample_tokenizer
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/sample_tokenizer.sh $<TARGET_FILE:xgrad-train> $<TARGET_FILE:xgrad-sample>
            ${CMAKE_CURRENT_BINARY_DIR}/sample_tokenizer)
endif()
