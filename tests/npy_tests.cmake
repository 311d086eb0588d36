# test_npy needs the .npy reader; without the tools/ directory (XGRAD_BUILD_TOOLS=OFF) it compiles it itself.
if(TARGET test_npy)
  if(TARGET xgrad_npy)
    target_link_libraries(test_npy PRIVATE xgrad_npy)
  else()
    target_sources(test_npy PRIVATE ${PROJECT_SOURCE_DIR}/tools/npy.cpp)
  endif()
endif()
