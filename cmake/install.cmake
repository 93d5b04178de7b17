include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TRAINKIT_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/trainkit")
install(TARGETS trainkit EXPORT trainkitTargets FILE_SET HEADERS)
install(EXPORT trainkitTargets NAMESPACE trainkit:: DESTINATION "${TRAINKIT_CMAKE_DIR}")
export(EXPORT trainkitTargets NAMESPACE trainkit::
       FILE "${PROJECT_BINARY_DIR}/trainkitTargets.cmake")

configure_package_config_file(cmake/trainkitConfig.cmake.in
  "${PROJECT_BINARY_DIR}/trainkitConfig.cmake" INSTALL_DESTINATION "${TRAINKIT_CMAKE_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/trainkitConfigVersion.cmake"
  COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/trainkitConfig.cmake"
              "${PROJECT_BINARY_DIR}/trainkitConfigVersion.cmake"
        DESTINATION "${TRAINKIT_CMAKE_DIR}")

# pkg-config, for builds without CMake. In the lib folder although trainkit is
# header-only: share/pkgconfig is for .pc files without a Libs line, and ours
# has `Libs: -fopenmp` (vcpkg checks this). The .pc finds its prefix from its
# own folder, as many ".." up as LIBDIR/pkgconfig is deep (lib/x86_64-linux-gnu
# under /usr on Debian).
file(RELATIVE_PATH TRAINKIT_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" TRAINKIT_PC_TO_PREFIX "${TRAINKIT_PC_TO_PREFIX}")
configure_file(cmake/trainkit.pc.in "${PROJECT_BINARY_DIR}/trainkit.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/trainkit.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")

install(FILES LICENSE DESTINATION "${CMAKE_INSTALL_DOCDIR}")
