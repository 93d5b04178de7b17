# CTest package.versions_agree, as `cmake -P versions.cmake`; with
# -DRELEASE=ON, scripts/release.sh's check before it tags.
#
# The version is written once, in include/trainkit/version.hpp. CMakeLists.txt
# and the Conan recipe read it from there; vcpkg.json cannot, so it must repeat
# it exactly. CHANGELOG.md's first section is that version's: dated once
# released, "(unreleased)" while it is prepared. README's FetchContent lines
# name the newest released version's tag (before the first release, the
# first section's).
set(root "${CMAKE_CURRENT_LIST_DIR}/../..")
include("${root}/cmake/version.cmake")

file(READ "${root}/packaging/vcpkg/ports/trainkit/vcpkg.json" manifest)
string(JSON vcpkg_version GET "${manifest}" version)
if(NOT vcpkg_version STREQUAL TRAINKIT_VERSION)
  message(FATAL_ERROR "packaging/vcpkg/ports/trainkit/vcpkg.json has version "
                      "${vcpkg_version}; include/trainkit/version.hpp says ${TRAINKIT_VERSION}")
endif()

file(STRINGS "${root}/packaging/conan/conanfile.py" hard_coded REGEX "^ +version *=")
if(hard_coded)
  message(FATAL_ERROR "packaging/conan/conanfile.py sets `${hard_coded}`: its set_version() "
                      "reads include/trainkit/version.hpp instead")
endif()

# CHANGELOG.md's sections: "## X.Y.Z (YYYY-MM-DD)" or "## X.Y.Z (unreleased)".
file(STRINGS "${root}/CHANGELOG.md" sections REGEX "^## ")
set(released "")
foreach(section IN LISTS sections)
  if(NOT section MATCHES "^## ([0-9]+\\.[0-9]+\\.[0-9]+) \\(([0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|unreleased)\\)$")
    message(FATAL_ERROR "CHANGELOG.md: `${section}` is not `## X.Y.Z (YYYY-MM-DD)` or "
                        "`## X.Y.Z (unreleased)`")
  endif()
  if(NOT first)
    set(first "${CMAKE_MATCH_1}")
    set(first_date "${CMAKE_MATCH_2}")
  endif()
  if(NOT released AND NOT CMAKE_MATCH_2 STREQUAL "unreleased")
    set(released "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(NOT first STREQUAL TRAINKIT_VERSION)
  message(FATAL_ERROR "CHANGELOG.md's first section is ${first}; include/trainkit/version.hpp "
                      "says ${TRAINKIT_VERSION}: add its section")
endif()
if(NOT released)
  set(released "${first}")
endif()

file(READ "${root}/README.md" readme)
if(NOT readme MATCHES "FetchContent_Declare\\(trainkit [^\n]* GIT_TAG ([^ )\n]+)")
  message(FATAL_ERROR "README.md has no FetchContent_Declare(trainkit ... GIT_TAG ...) line")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL "v${released}")
  message(FATAL_ERROR "README.md's FetchContent line names ${CMAKE_MATCH_1}; the newest release "
                      "in CHANGELOG.md is ${released}: v${released}")
endif()

if(RELEASE AND first_date STREQUAL "unreleased")
  message(FATAL_ERROR "CHANGELOG.md's section ${first} is unreleased: date it to release it")
endif()
message(STATUS "version ${TRAINKIT_VERSION}: version.hpp, vcpkg.json, the Conan recipe, "
               "CHANGELOG.md and README.md (v${released}) agree")
