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

# pkg-config, for builds without CMake; arch-independent (header-only).
configure_file(cmake/trainkit.pc.in "${PROJECT_BINARY_DIR}/trainkit.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/trainkit.pc" DESTINATION "${CMAKE_INSTALL_DATADIR}/pkgconfig")
