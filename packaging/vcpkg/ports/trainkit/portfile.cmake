# An overlay port that builds from the checkout it lives in:
#   vcpkg install trainkit --overlay-ports=<checkout>/packaging/vcpkg/ports
# (a registry port would take a released tag with vcpkg_from_github instead).
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../../../.." ABSOLUTE)

# vcpkg's ABI hash covers this folder only; source-hash.txt carries the
# sources' hash into it. Build nothing that would be cached under a stale one.
set(CHECK ON)
include("${SOURCE_PATH}/packaging/vcpkg/update_source_hash.cmake")

set(VCPKG_BUILD_TYPE release)  # header-only: no per-configuration files
# trainkit::tune follows the feature, not whatever SQLite/libpq the machine has.
if("tune" IN_LIST FEATURES)
  set(TUNE_OPTIONS -DCMAKE_REQUIRE_FIND_PACKAGE_SQLite3=ON
                   -DCMAKE_REQUIRE_FIND_PACKAGE_PostgreSQL=ON)
else()
  set(TUNE_OPTIONS -DCMAKE_DISABLE_FIND_PACKAGE_SQLite3=ON
                   -DCMAKE_DISABLE_FIND_PACKAGE_PostgreSQL=ON)
endif()
vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${TUNE_OPTIONS}
    -DTRAINKIT_BUILD_TESTS=OFF
    -DTRAINKIT_BUILD_EXAMPLES=OFF
    -DTRAINKIT_BUILD_BENCH=OFF
    -DTRAINKIT_VERIFY_HEADERS=OFF
    -DTRAINKIT_INSTALL=ON
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/trainkit)
# lib/pkgconfig/trainkit.pc (it has a Libs line, so not share/) and, with the
# feature tune, trainkit-tune.pc beside it.
vcpkg_fixup_pkgconfig()

# The license goes where vcpkg wants it, not in share/doc as `cmake --install` puts it.
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/share/doc")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
