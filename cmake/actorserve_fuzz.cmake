# libFuzzer targets (fuzz/): built with -DACTORSERVE_FUZZ=ON, clang and ACTORSERVE_SANITIZE=address.
# actorserve_fuzz_instrument(<lib>...) adds libFuzzer's coverage instrumentation to project
# libraries; actorserve_fuzz_target(<name> DEPS <libs>) builds fuzz/targets/<name>.cpp.

if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "ACTORSERVE_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
endif()
if(NOT ACTORSERVE_SANITIZE STREQUAL "address")
  message(WARNING "ACTORSERVE_FUZZ without ACTORSERVE_SANITIZE=address: fuzzing finds only crashes, not memory errors")
endif()

# -Wno-... flags for the fuzz (clang) build only: ACTORSERVE_WARNINGS carries GCC's -Wno-restrict
# (cmake/actorserve_layers.cmake:7), which clang rejects under -Werror as an unknown option.
set(ACTORSERVE_FUZZ_NO_WARN -Wno-unknown-warning-option)

# UBSan findings are recoverable in the fuzz build so that fuzz/known_issues.txt can suppress a
# reported one; fuzz/targets/sanitizer_options.cpp makes every other one fatal (halt_on_error).
set(ACTORSERVE_FUZZ_FLAGS -fsanitize=fuzzer-no-link -fsanitize-recover=undefined ${ACTORSERVE_FUZZ_NO_WARN})

function(actorserve_fuzz_instrument)
  foreach(lib IN LISTS ARGN)
    target_compile_options(${lib} PRIVATE ${ACTORSERVE_FUZZ_FLAGS})
  endforeach()
endfunction()

function(actorserve_fuzz_target name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  add_executable(${name} ${ACTORSERVE_FUZZ_DIR}/targets/${name}.cpp ${ACTORSERVE_FUZZ_DIR}/targets/sanitizer_options.cpp)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_include_directories(${name} PRIVATE ${ACTORSERVE_FUZZ_DIR}/targets)
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer -fsanitize-recover=undefined
                         $<$<COMPILE_LANGUAGE:CXX>:${ACTORSERVE_WARNINGS}> ${ACTORSERVE_FUZZ_NO_WARN})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_compile_definitions(${name} PRIVATE ACTORSERVE_FUZZ_DATA_DEFAULT="${CMAKE_SOURCE_DIR}/tests/data")
  # build-fuzz/fuzz/<name> whether fuzz/ is a subdirectory or included by the hook.
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/fuzz")
  set_property(GLOBAL APPEND PROPERTY ACTORSERVE_FUZZ_TARGETS ${name})
endfunction()
