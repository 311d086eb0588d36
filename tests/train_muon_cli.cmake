# xgrad-train --optimizer muon's command line: runs, resumes and refusals (tests/train_muon_cli.sh).
if(TARGET xgrad-train)
  add_test(NAME train_muon_cli
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/train_muon_cli.sh $<TARGET_FILE:xgrad-train> ${CMAKE_CURRENT_BINARY_DIR}/train_muon_cli)
  set_tests_properties(train_muon_cli PROPERTIES TIMEOUT 300)
endif()
