# One library per source folder. Each folder's headers are reachable as "<folder>/x.hpp" only
# through a per-folder include root in the build tree (a symlink named after the folder), and that
# root is exported only to targets that link the library. A wrong-way include therefore fails to
# compile: protocol/ cannot see "gpu/..." because it does not link actorserve_gpu.

set(ACTORSERVE_WARNINGS -Wall -Wextra -Wpedantic -Werror -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12 reports false -Wrestrict overlaps inside std::string at -O3 (GCC bug 105329).
  list(APPEND ACTORSERVE_WARNINGS -Wno-restrict)
endif()

function(actorserve_include_root folder out_var)
  set(root "${CMAKE_BINARY_DIR}/include_roots/${folder}")
  if(NOT EXISTS "${root}/${folder}")
    file(MAKE_DIRECTORY "${root}")
    file(CREATE_LINK "${CMAKE_SOURCE_DIR}/${folder}" "${root}/${folder}" SYMBOLIC)
  endif()
  set(${out_var} "${root}" PARENT_SCOPE)
endfunction()

# actorserve_library(<folder> [DEPS targets...]) -> target actorserve_<folder>
# Sources: every .cpp under the folder except main.cpp files and the cuda/ subfolder.
function(actorserve_library folder)
  cmake_parse_arguments(ARG "" "" "DEPS;EXCLUDE" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/${folder}/*.cpp")
  list(FILTER sources EXCLUDE REGEX "/main\\.cpp$")
  list(FILTER sources EXCLUDE REGEX "/${folder}/cuda/")
  foreach(pattern IN LISTS ARG_EXCLUDE)
    list(FILTER sources EXCLUDE REGEX "${pattern}")
  endforeach()
  if(NOT sources)
    set(sources "${CMAKE_BINARY_DIR}/empty_${folder}.cpp")
    file(WRITE "${sources}" "// ${folder}/ has no sources yet\n")
  endif()
  set(target actorserve_${folder})
  add_library(${target} STATIC ${sources})
  actorserve_include_root(${folder} root)
  target_include_directories(${target} PUBLIC "${root}")
  target_link_libraries(${target} PUBLIC ${ARG_DEPS})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${ACTORSERVE_WARNINGS}>)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()
