# The GPT described once (tools/check_one_description.py): each config key and parameter name spelled in
# one C++ file (and a key in at most one Python file) outside the tests, docs and foreign-format mappings;
# and the check's own self-test, which must find a restating file added to the tree.
if(Python3_EXECUTABLE)  # CMakeLists.txt: Debian's python3 first
  add_test(NAME one_description
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/check_one_description.py ${PROJECT_SOURCE_DIR})
  add_test(NAME one_description_self_test
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/check_one_description.py --self-test)
endif()
