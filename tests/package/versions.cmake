# CTest package.versions_agree, as `cmake -P versions.cmake`; with
# -DRELEASE=ON, scripts/release.sh's check before it tags.
#
# The version is written once, in include/trainkit/version.hpp. CMakeLists.txt
# and the Conan recipe read it from there; vcpkg.json cannot, so it must repeat
# it exactly. CHANGELOG.md's first section is that version's: dated once
# released, "(unreleased)" while it is prepared. README's FetchContent line
# names the newest release's commit (the published repository has no tags).
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

# CHANGELOG.md's sections: "## X.Y.Z (YYYY-MM-DD)" or "## X.Y.Z (unreleased)";
# a released one gives its release commit on a line of its own,
# "Release commit: `<40 hex digits>`", once scripts/release.sh record wrote it.
file(STRINGS "${root}/CHANGELOG.md" lines REGEX "^(## |Release commit: )")
set(released "")
set(section "")
foreach(line IN LISTS lines)
  if(line MATCHES "^Release commit: `([0-9a-f]+)`$")
    string(LENGTH "${CMAKE_MATCH_1}" length)
    if(NOT length EQUAL 40 OR section_date STREQUAL "unreleased" OR NOT section)
      message(FATAL_ERROR "CHANGELOG.md: `${line}` must follow a dated section's heading and "
                          "give a full 40-digit hash")
    endif()
    if(NOT released)
      set(released "${section}")
      set(released_commit "${CMAKE_MATCH_1}")
    endif()
    if(section STREQUAL first)
      set(first_recorded TRUE)
    endif()
    continue()
  endif()
  if(NOT line MATCHES "^## ([0-9]+\\.[0-9]+\\.[0-9]+) \\(([0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|unreleased)\\)$")
    message(FATAL_ERROR "CHANGELOG.md: `${line}` is not `## X.Y.Z (YYYY-MM-DD)` or "
                        "`## X.Y.Z (unreleased)`")
  endif()
  set(section "${CMAKE_MATCH_1}")
  set(section_date "${CMAKE_MATCH_2}")
  if(NOT first)
    set(first "${CMAKE_MATCH_1}")
    set(first_date "${CMAKE_MATCH_2}")
  endif()
endforeach()
if(NOT first STREQUAL TRAINKIT_VERSION)
  message(FATAL_ERROR "CHANGELOG.md's first section is ${first}; include/trainkit/version.hpp "
                      "says ${TRAINKIT_VERSION}: add its section")
endif()

# README's FetchContent line names the newest recorded release's commit, and
# its version in a comment: `GIT_TAG <commit>)  # X.Y.Z`.
file(READ "${root}/README.md" readme)
if(NOT readme MATCHES "FetchContent_Declare\\(trainkit [^\n]* GIT_TAG ([^ )\n]+)\\) *# *([0-9.]+)\n")
  message(FATAL_ERROR "README.md has no `FetchContent_Declare(trainkit ... GIT_TAG <commit>)  # X.Y.Z` line")
endif()
set(readme_commit "${CMAKE_MATCH_1}")
set(readme_version "${CMAKE_MATCH_2}")
if(NOT released)
  message(FATAL_ERROR "CHANGELOG.md records no release commit (`Release commit: ...` under a "
                      "dated section): README's FetchContent line has nothing to name")
endif()
if(NOT readme_commit STREQUAL released_commit OR NOT readme_version STREQUAL released)
  message(FATAL_ERROR "README.md's FetchContent line names ${readme_commit} (${readme_version}); "
                      "CHANGELOG.md's newest release is ${released} at ${released_commit}")
endif()

if(RELEASE AND first_date STREQUAL "unreleased")
  message(FATAL_ERROR "CHANGELOG.md's section ${first} is unreleased: date it to release it")
endif()
if(RELEASE AND first_recorded)
  message(FATAL_ERROR "CHANGELOG.md's section ${first} has its release commit already")
endif()
message(STATUS "version ${TRAINKIT_VERSION}: version.hpp, vcpkg.json, the Conan recipe, "
               "CHANGELOG.md and README.md (${released} at ${released_commit}) agree")
