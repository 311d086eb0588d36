# The code blocks of README.md and docs/*.md, checked (tests/doc_blocks.py): per markdown file, its C++
# blocks are built as one program with the library, and one ctest runs that program, the shell blocks,
# the Python blocks and the transcripts. Plus one ctest that every docs/spec.md citation names a heading
# there and that nothing points outside the repository. The blocks use train/ too: not with
# XGRAD_BUILD_TRAIN=OFF.
if(Python3_EXECUTABLE AND XGRAD_BUILD_TRAIN)  # CMakeLists.txt: Debian's python3 first
  # Pages whose blocks carry no markers yet; each leaves this list once its blocks are marked.
  set(XGRAD_DOC_BLOCKS_PENDING performance.md experiments.md python.md)

  file(GLOB XGRAD_DOC_PAGES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.md)
  set(XGRAD_DOC_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/doc_blocks.py)
  foreach(page ${PROJECT_SOURCE_DIR}/README.md ${XGRAD_DOC_PAGES})
    get_filename_component(page_name ${page} NAME)
    get_filename_component(stem ${page} NAME_WE)
    if(page_name IN_LIST XGRAD_DOC_BLOCKS_PENDING)
      continue()
    endif()
    set(dir ${CMAKE_CURRENT_BINARY_DIR}/doc_blocks/${stem})
    add_custom_command(OUTPUT ${dir}/doc_blocks.cpp ${dir}/blocks.json
      COMMAND ${Python3_EXECUTABLE} ${XGRAD_DOC_SCRIPT} extract ${page} ${dir} --source ${PROJECT_SOURCE_DIR}
      DEPENDS ${page} ${XGRAD_DOC_SCRIPT}
      COMMENT "Extracting the code blocks of ${page_name}")
    add_executable(doc_blocks_${stem} ${dir}/doc_blocks.cpp)
    target_include_directories(doc_blocks_${stem} PRIVATE ${dir} ${CMAKE_CURRENT_LIST_DIR})
    target_link_libraries(doc_blocks_${stem} PRIVATE xgrad xgrad_doctest)
    # The test programs' precompiled header (doctest, test_util.hpp: what the blocks include): README.md's
    # page compiles in half the time, the smallest pages a few tenths of a second slower
    # (docs/performance.md, "The build").
    xgrad_precompiled_headers(doc_blocks_${stem} xgrad_test_header)
    add_test(NAME doc_blocks_${stem}
      COMMAND ${Python3_EXECUTABLE} ${XGRAD_DOC_SCRIPT} run ${dir} --source ${PROJECT_SOURCE_DIR}
              --build ${PROJECT_BINARY_DIR} --exe $<TARGET_FILE:doc_blocks_${stem}>)
    xgrad_not_under_sanitizers(doc_blocks_${stem})  # the docs' examples, run whole
  endforeach()

  add_test(NAME doc_blocks_selftest COMMAND ${Python3_EXECUTABLE} ${XGRAD_DOC_SCRIPT} selftest)
  add_test(NAME doc_citations COMMAND ${Python3_EXECUTABLE} ${XGRAD_DOC_SCRIPT} citations --source ${PROJECT_SOURCE_DIR})
endif()
