# test_fixtures reads the PyTorch reference cases (tests/data/fixtures) with the .npy reader; without the
# tools/ directory (XGRAD_BUILD_TOOLS=OFF) it compiles the reader itself.
if(TARGET test_fixtures)
  if(TARGET xgrad_npy)
    target_link_libraries(test_fixtures PRIVATE xgrad_npy)
  else()
    target_sources(test_fixtures PRIVATE ${PROJECT_SOURCE_DIR}/tools/npy.cpp)
  endif()
endif()
