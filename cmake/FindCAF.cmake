# Debian's libcaf-dev ships headers and shared libraries but no CMake or pkg-config file.
# Defines CAF::core, CAF::io, CAF::openssl and CAF_VERSION. The cache variables CAF_INCLUDE_DIR and
# CAF_CORE_LIBRARY select another build: scripts/sanitize.sh tsan points them at the prefix of
# scripts/build_tsan_caf.sh (its include/ carries that build's generated caf/detail/build_config.hpp;
# CMake adds its lib/ to the build RPATH).
find_path(CAF_INCLUDE_DIR caf/all.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
find_library(CAF_OPENSSL_LIBRARY caf_openssl)
if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line REGEX "#define CAF_VERSION [0-9]+")
  string(REGEX MATCH "[0-9]+" _caf_v "${_caf_version_line}")
  math(EXPR _major "${_caf_v} / 10000")
  math(EXPR _minor "(${_caf_v} / 100) % 100")
  math(EXPR _patch "${_caf_v} % 100")
  set(CAF_VERSION "${_major}.${_minor}.${_patch}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY
                                  VERSION_VAR CAF_VERSION)
if(CAF_FOUND AND NOT TARGET CAF::core)
  add_library(CAF::core SHARED IMPORTED)
  set_target_properties(CAF::core PROPERTIES IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}")
  add_library(CAF::io SHARED IMPORTED)
  set_target_properties(CAF::io PROPERTIES IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
                        INTERFACE_LINK_LIBRARIES CAF::core)
  # libcaf_openssl (BASP over TLS); its headers include OpenSSL's.
  add_library(CAF::openssl SHARED IMPORTED)
  set_target_properties(CAF::openssl PROPERTIES IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
                        INTERFACE_LINK_LIBRARIES CAF::io)
endif()
