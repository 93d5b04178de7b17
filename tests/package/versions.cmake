# CTest package.versions_agree, as `cmake -P versions.cmake`: the version is
# written once, in include/trainkit/version.hpp. CMakeLists.txt and the Conan
# recipe read it from there; vcpkg.json cannot, so it must repeat it exactly.
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
message(STATUS "version ${TRAINKIT_VERSION}: version.hpp, vcpkg.json and the Conan recipe agree")
