# ccache for the project's builds (the main one and fuzz/'s), when installed and the configure names no
# launcher of its own (tools/build_times.sh does). Rebuilds in fresh build folders are quick, also in
# another clone: paths under the repository are hashed relative to the build folder (CCACHE_BASEDIR), the
# build folder itself is not hashed into files with debug information (CCACHE_NOHASHDIR), and no compile
# command names the clone (the precompiled headers are included by name, not path; tests/source_dir.hpp).
# Files compiled with a precompiled header are cached only when ccache may take the header's macros and
# __TIME__ as unchanged (its manual, "Precompiled headers"). Each such hit hashes the header's .gch (100 MB
# or more) unless the hash is kept by inode (CCACHE_INODECACHE): 0.9 s a hit without, 0.04 s with.
# docs/performance.md, "The build".
function(xgrad_use_ccache repository)
  find_program(XGRAD_CCACHE ccache)
  if(XGRAD_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
    set(CMAKE_CXX_COMPILER_LAUNCHER env CCACHE_SLOPPINESS=pch_defines,time_macros CCACHE_BASEDIR=${repository}
      CCACHE_NOHASHDIR=true CCACHE_INODECACHE=true ${XGRAD_CCACHE} PARENT_SCOPE)
  endif()
endfunction()
