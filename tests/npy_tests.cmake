# The tests that read .npy files (the reader's own tests and the PyTorch reference cases) link the reader;
# without the tools/ directory (XGRAD_BUILD_TOOLS=OFF) they compile it themselves.
foreach(test test_npy test_fixtures)
  if(TARGET ${test})
    if(TARGET xgrad_npy)
      target_link_libraries(${test} PRIVATE xgrad_npy)
    else()
      target_sources(${test} PRIVATE ${PROJECT_SOURCE_DIR}/tools/npy.cpp)
    endif()
  endif()
endforeach()
