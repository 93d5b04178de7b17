include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TRAINKIT_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/trainkit")
install(TARGETS trainkit EXPORT trainkitTargets FILE_SET HEADERS FILE_SET separate_compilation
        FILE_SET cuda_kernels)
install(EXPORT trainkitTargets NAMESPACE trainkit:: DESTINATION "${TRAINKIT_CMAKE_DIR}")
export(EXPORT trainkitTargets NAMESPACE trainkit::
       FILE "${PROJECT_BINARY_DIR}/trainkitTargets.cmake")

# The hyperparameter search, component `tune`, in an export file of its own:
# trainkitTargets.cmake then names no SQLite or libpq target, and
# find_package(trainkit) without the component needs neither installed.
# trainkitConfig.cmake loads this file only for COMPONENTS tune.
set(TRAINKIT_TUNE_WITH_POSTGRES OFF)  # read by trainkitConfig.cmake.in
if(TARGET trainkit_tune)
  if(PostgreSQL_FOUND)
    set(TRAINKIT_TUNE_WITH_POSTGRES ON)
  endif()
  install(TARGETS trainkit_tune EXPORT trainkitTuneTargets FILE_SET HEADERS)
  install(EXPORT trainkitTuneTargets NAMESPACE trainkit:: DESTINATION "${TRAINKIT_CMAKE_DIR}")
  export(EXPORT trainkitTuneTargets NAMESPACE trainkit::
         FILE "${PROJECT_BINARY_DIR}/trainkitTuneTargets.cmake")
else()
  # The config file loads the component when this file exists: not a stale one
  # from an earlier configure that found SQLite3.
  file(REMOVE "${PROJECT_BINARY_DIR}/trainkitTuneTargets.cmake")
endif()

configure_package_config_file(cmake/trainkitConfig.cmake.in
  "${PROJECT_BINARY_DIR}/trainkitConfig.cmake" INSTALL_DESTINATION "${TRAINKIT_CMAKE_DIR}")
# 0.x: a minor version may break code written for the one before
# (CHANGELOG.md), so find_package(trainkit 0.1) takes 0.1.y only.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/trainkitConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
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
# trainkit-tune.pc: trainkit's flags plus SQLite's (and libpq's when linked).
# Beside trainkit.pc, so that one PKG_CONFIG_PATH entry finds both; vcpkg
# accepts a .pc without a Libs line in lib/pkgconfig.
if(TARGET trainkit_tune)
  set(TRAINKIT_TUNE_PC_REQUIRES "trainkit = ${PROJECT_VERSION}, sqlite3")
  if(TRAINKIT_TUNE_WITH_POSTGRES)
    string(APPEND TRAINKIT_TUNE_PC_REQUIRES ", libpq")
  endif()
  configure_file(cmake/trainkit-tune.pc.in "${PROJECT_BINARY_DIR}/trainkit-tune.pc" @ONLY)
  install(FILES "${PROJECT_BINARY_DIR}/trainkit-tune.pc"
          DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endif()

install(FILES LICENSE DESTINATION "${CMAKE_INSTALL_DOCDIR}")
