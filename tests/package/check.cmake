# One packaging check, run by CTest as `cmake -D... -P check.cmake`:
#   MODE      find_package | find_package_without_torch | add_subdirectory | fetchcontent
#   SOURCE    the trainkit checkout;  BUILD  its configured build tree
#   WORK      a scratch folder;       GENERATOR  the CMake generator to use
cmake_minimum_required(VERSION 3.24)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(run)  # run(<command>...): fail the test with the output when it fails
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(consumer "${CMAKE_CURRENT_LIST_DIR}/consumer")
set(configure ${CMAKE_COMMAND} -S "${consumer}" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release)

if(MODE MATCHES "^find_package")
  set(prefix "${WORK}/prefix")
  run(${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}")
  foreach(f include/trainkit/trainkit.hpp include/trainkit/io/tfevents.hpp
            share/cmake/trainkit/trainkitConfig.cmake
            share/cmake/trainkit/trainkitConfigVersion.cmake
            share/cmake/trainkit/trainkitTargets.cmake share/doc/trainkit/LICENSE)
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "cmake --install did not install ${f}")
    endif()
  endforeach()
  # trainkit.pc has a Libs line: <libdir>/pkgconfig, not share/pkgconfig.
  file(GLOB_RECURSE pc RELATIVE "${prefix}" "${prefix}/*.pc")
  if(NOT pc MATCHES "^lib[^;]*/pkgconfig/trainkit.pc$")
    message(FATAL_ERROR "trainkit.pc must be installed alone in <libdir>/pkgconfig; found: ${pc}")
  endif()
  # pkg-config finds it, relocated, with its dependencies.
  get_filename_component(pc_dir "${prefix}/${pc}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  run(pkg-config --cflags --libs trainkit)
  string(REGEX MATCH "-I([^ ]+)" include "${last_output}")
  if(NOT EXISTS "${CMAKE_MATCH_1}/trainkit/trainkit.hpp" OR NOT last_output MATCHES "-std=c\\+\\+20")
    message(FATAL_ERROR "pkg-config --cflags trainkit: ${last_output}")
  endif()
  run(pkg-config --modversion trainkit)
  message(STATUS "pkg-config: trainkit ${last_output}")
  list(APPEND configure "-DCMAKE_PREFIX_PATH=${prefix}" -DTRAINKIT_CONSUME=find_package)
  if(MODE STREQUAL "find_package_without_torch")
    execute_process(COMMAND ${configure} -B "${WORK}/build" -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(rc EQUAL 0 OR NOT out MATCHES "CMAKE_PREFIX_PATH" OR NOT out MATCHES "Torch_DIR")
      message(FATAL_ERROR "without LibTorch, find_package(trainkit) must fail naming "
                          "CMAKE_PREFIX_PATH and Torch_DIR; got (${rc}):\n${out}")
    endif()
    message(STATUS "without LibTorch: failed as expected, naming CMAKE_PREFIX_PATH and Torch_DIR")
    return()
  endif()
elseif(MODE STREQUAL "add_subdirectory")
  list(APPEND configure -DTRAINKIT_CONSUME=add_subdirectory "-DTRAINKIT_SOURCE=${SOURCE}")
elseif(MODE STREQUAL "fetchcontent")
  run(git -C "${SOURCE}" rev-parse HEAD)  # the checkout's last commit, cloned locally
  string(STRIP "${last_output}" head)
  list(APPEND configure -DTRAINKIT_CONSUME=fetchcontent "-DTRAINKIT_SOURCE=${SOURCE}"
              "-DTRAINKIT_GIT_TAG=${head}")
else()
  message(FATAL_ERROR "unknown MODE ${MODE}")
endif()

run(${configure} -B "${WORK}/build")
if(MODE STREQUAL "find_package")
  # An installed trainkit decides TRAINKIT_HAS_CUDA from the user's LibTorch,
  # not the packager's: nothing baked in, and a (fake) torch_cuda turns it on.
  file(READ "${prefix}/share/cmake/trainkit/trainkitTargets.cmake" targets)
  if(targets MATCHES "TRAINKIT_HAS_CUDA")
    message(FATAL_ERROR "the installed trainkitTargets.cmake fixes TRAINKIT_HAS_CUDA")
  endif()
  run(${configure} -B "${WORK}/build_cuda" -DTRAINKIT_FAKE_TORCH_CUDA=ON)
  if(NOT last_output MATCHES "trainkit::trainkit defines: [^\n]*TRAINKIT_HAS_CUDA=1")
    message(FATAL_ERROR "find_package(trainkit) next to a torch_cuda target must define "
                        "TRAINKIT_HAS_CUDA=1:\n${last_output}")
  endif()
endif()
run(${CMAKE_COMMAND} --build "${WORK}/build")
run("${WORK}/build/consumer" "${WORK}/events")
message(STATUS "${last_output}")
file(GLOB events "${WORK}/events/events.out.tfevents.*")
if(NOT events)
  message(FATAL_ERROR "the consumer wrote no event file")
endif()
