# An overlay port that builds from the checkout it lives in:
#   vcpkg install trainkit --overlay-ports=<checkout>/packaging/vcpkg/ports
# (a registry port would take the sources with vcpkg_from_git instead).
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../../../.." ABSOLUTE)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DTRAINKIT_BUILD_TESTS=OFF
    -DTRAINKIT_BUILD_EXAMPLES=OFF
    -DTRAINKIT_BUILD_BENCH=OFF
    -DTRAINKIT_VERIFY_HEADERS=OFF
    -DTRAINKIT_INSTALL=ON
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/trainkit)
vcpkg_fixup_pkgconfig()

# Header-only: nothing per configuration.
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright"
     "trainkit: no license has been chosen yet; see the project's README.\n")
