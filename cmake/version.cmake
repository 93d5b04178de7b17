# Sets TRAINKIT_VERSION from include/trainkit/version.hpp, the version's one
# source: CMakeLists.txt includes this before project(), the Conan recipe
# parses the same macros, and CTest package.versions_agree holds vcpkg.json to them.
set(TRAINKIT_VERSION "")
foreach(part MAJOR MINOR PATCH)
  file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../include/trainkit/version.hpp" line
       REGEX "^#define TRAINKIT_VERSION_${part} [0-9]+$")
  if(NOT line MATCHES " ([0-9]+)$")
    message(FATAL_ERROR "include/trainkit/version.hpp defines no TRAINKIT_VERSION_${part}")
  endif()
  list(APPEND TRAINKIT_VERSION ${CMAKE_MATCH_1})
endforeach()
list(JOIN TRAINKIT_VERSION "." TRAINKIT_VERSION)
unset(part)
unset(line)
