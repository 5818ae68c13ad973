# Used as -DCMAKE_PROJECT_INCLUDE=cmake/actorserve_fuzz_hook.cmake while the root CMakeLists.txt
# has no `add_subdirectory(fuzz)`: includes fuzz/CMakeLists.txt at the end of the top-level
# directory, once every library target exists (a deferred call may not add a subdirectory).
# scripts/fuzz_smoke.sh passes it only when the root line is missing.
if(ACTORSERVE_FUZZ)
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL include ${CMAKE_SOURCE_DIR}/fuzz/CMakeLists.txt)
endif()
