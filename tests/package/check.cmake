# One packaging check, run by CTest as `cmake -D... -P check.cmake`:
#   MODE      find_package | find_package_without_torch | add_subdirectory | fetchcontent
#   SOURCE    the trainkit checkout;  BUILD  its configured build tree
#   WORK      a scratch folder;       GENERATOR  the CMake generator to use
# find_package, fetchcontent and add_subdirectory (by the plain compiler
# line) build and run README's quick start (examples/quickstart/) in a fresh
# folder with README's own commands.
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

# README's quick start: its two files, shown in full in README, must be the
# files of examples/quickstart/; its command line is README's one line that
# starts with `cmake -S . -B build `.
set(quickstart "${SOURCE}/examples/quickstart")
file(READ "${SOURCE}/README.md" readme)
foreach(shown main.cpp:cpp CMakeLists.txt:cmake)
  string(REPLACE ":" ";" shown "${shown}")
  list(GET shown 0 name)
  list(GET shown 1 lang)
  file(READ "${quickstart}/${name}" text)
  string(FIND "${readme}" "```${lang}\n${text}```" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "README.md does not show examples/quickstart/${name} as it is")
  endif()
endforeach()
string(REGEX MATCHALL "\ncmake -S \\. -B build [^\n]*" commands "${readme}")
list(LENGTH commands n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "README.md must give one quick start command line "
                      "`cmake -S . -B build ...`; it gives ${n}")
endif()
string(STRIP "${commands}" quickstart_command)

# Builds and runs the quick start (`quickstart_main`: this checkout's, or a
# release's) in the fresh folder WORK/name, with `cmake_lists` (if any) as its
# CMakeLists.txt and `command` (README's, adapted).
set(quickstart_main "${quickstart}/main.cpp")
function(run_quickstart name cmake_lists command)
  set(dir "${WORK}/${name}")
  file(MAKE_DIRECTORY "${dir}")
  file(COPY_FILE "${quickstart_main}" "${dir}/main.cpp")
  if(cmake_lists)  # the plain compiler line needs none
    file(WRITE "${dir}/CMakeLists.txt" "${cmake_lists}")
  endif()
  message(STATUS "quick start (${name}), in ${dir}: ${command}")
  execute_process(COMMAND sh -c "${command}" WORKING_DIRECTORY "${dir}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  # the program itself fails below 0.95; a perfect score prints 1
  if(NOT rc EQUAL 0 OR NOT out MATCHES "val_accuracy (1|0\\.9[0-9]*) after 20 epochs")
    message(FATAL_ERROR "the quick start (${name}) failed (${rc}): ${command}\n${out}\n${err}")
  endif()
  string(REGEX MATCH "val_accuracy [^\n]*" result "${out}")
  message(STATUS "quick start (${name}): ${result}")
endfunction()

set(consumer "${CMAKE_CURRENT_LIST_DIR}/consumer")
set(configure ${CMAKE_COMMAND} -S "${consumer}" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release)
# The search (trainkit::tune) is built where SQLite3 is found: the build tree
# exports it then, and the consumer also builds and runs a search.
if(EXISTS "${BUILD}/trainkitTuneTargets.cmake")
  set(tune ON)
else()
  set(tune OFF)
  message(STATUS "this build has no trainkit::tune (no SQLite3): the search is not checked")
endif()

if(MODE MATCHES "^find_package")
  set(prefix "${WORK}/prefix")
  run(${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}")
  set(installed include/trainkit/trainkit.hpp include/trainkit/io/tfevents.hpp
      share/cmake/trainkit/trainkitConfig.cmake share/cmake/trainkit/trainkitConfigVersion.cmake
      share/cmake/trainkit/trainkitTargets.cmake share/doc/trainkit/LICENSE)
  if(tune)
    list(APPEND installed include/trainkit/tune.hpp include/trainkit/tune/study.hpp
         share/cmake/trainkit/trainkitTuneTargets.cmake)
  endif()
  foreach(f IN LISTS installed)
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "cmake --install did not install ${f}")
    endif()
  endforeach()
  # The core's export names no SQLite or libpq target: users who do not
  # search need neither.
  file(READ "${prefix}/share/cmake/trainkit/trainkitTargets.cmake" targets)
  if(targets MATCHES "SQLite|PostgreSQL|tune")
    message(FATAL_ERROR "the installed trainkitTargets.cmake names the search or its "
                        "dependencies; they belong in trainkitTuneTargets.cmake")
  endif()
  # trainkit.pc has a Libs line: <libdir>/pkgconfig, not share/pkgconfig;
  # trainkit-tune.pc (the search) beside it.
  file(GLOB_RECURSE pc RELATIVE "${prefix}" "${prefix}/*.pc")
  list(SORT pc)  # trainkit-tune.pc, then trainkit.pc
  set(pc_expected "lib[^;]*/pkgconfig/trainkit.pc")
  if(tune)
    set(pc_expected "lib[^;]*/pkgconfig/trainkit-tune.pc;${pc_expected}")
    list(GET pc 0 pc_tune)
    get_filename_component(pc_tune "${pc_tune}" DIRECTORY)
  endif()
  set(pc_all "${pc}")
  list(GET pc -1 pc)
  get_filename_component(pc_dir "${pc}" DIRECTORY)
  if(NOT pc_all MATCHES "^${pc_expected}$" OR (tune AND NOT pc_tune STREQUAL pc_dir))
    message(FATAL_ERROR "trainkit.pc (and trainkit-tune.pc with the search) must be installed "
                        "alone in <libdir>/pkgconfig; found: ${pc_all}")
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
  if(tune)
    run(pkg-config --cflags --libs trainkit-tune)
    if(NOT last_output MATCHES "-lsqlite3" OR NOT last_output MATCHES "-std=c\\+\\+20")
      message(FATAL_ERROR "pkg-config --cflags --libs trainkit-tune: ${last_output}")
    endif()
    message(STATUS "pkg-config: trainkit-tune ${last_output}")
  endif()
  list(APPEND configure "-DCMAKE_PREFIX_PATH=${prefix}" -DTRAINKIT_CONSUME=find_package)
  if(MODE STREQUAL "find_package_without_torch")
    execute_process(COMMAND ${configure} -DTRAINKIT_TUNE=${tune} -B "${WORK}/build" -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON
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
  # README's plain compiler line, its checkout ~/trainkit being this one
  string(REGEX MATCHALL "\ng\\+\\+ -std=c\\+\\+20 [^\n]*" lines "${readme}")
  list(LENGTH lines n)
  if(NOT n EQUAL 1 OR NOT lines MATCHES "~/trainkit/include")
    message(FATAL_ERROR "README.md must give one plain compiler line `g++ -std=c++20 ... "
                        "-I ~/trainkit/include ...`; it gives ${n}: ${lines}")
  endif()
  string(STRIP "${lines}" command)
  string(REPLACE "~/trainkit/include" "${SOURCE}/include" command "${command}")
  run_quickstart(plain_compiler_line "" "${command}")
  # The same line links a program of the opt-in headers (checkpoints need zlib).
  set(dir "${WORK}/plain_compiler_line_io")
  file(WRITE "${dir}/main.cpp" [=[
#include <trainkit/callbacks.hpp>
#include <trainkit/io.hpp>
#include <trainkit/trainkit.hpp>
#include <iostream>
int main() {
  trainkit::io::Checkpoint ckpt;
  ckpt.parts["model"].tensors["w"] = torch::ones({2});
  const auto bytes = trainkit::io::to_checkpoint_bytes(ckpt);
  const auto back = trainkit::io::from_checkpoint_bytes(bytes, "memory");
  std::cout << "val_accuracy 1 after 20 epochs (a checkpoint of " << bytes.size()
            << " bytes read back: " << back.parts.at("model").tensors.count("w") << ")\n";
}
]=])
  execute_process(COMMAND sh -c "${command}" WORKING_DIRECTORY "${dir}" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "read back: 1")
    message(FATAL_ERROR "README's plain compiler line does not build a program of io.hpp and "
                        "callbacks.hpp (${rc}): ${command}\n${out}\n${err}")
  endif()
  message(STATUS "the plain compiler line builds io.hpp and callbacks.hpp: ${out}")
elseif(MODE STREQUAL "fetchcontent")
  # README's FetchContent lines in the quick start of the release they name,
  # fetched from the published form of this repository: a clone of its one
  # branch, without tags (tags and other branches never reach users), so the
  # GIT_TAG must be a commit of that branch (CHANGELOG's release commit).
  if(NOT readme MATCHES "```cmake\n(include\\(FetchContent\\)\n[^`]*)```")
    message(FATAL_ERROR "README.md shows no ```cmake block that starts with include(FetchContent)")
  endif()
  set(fetch "${CMAKE_MATCH_1}")
  if(NOT fetch MATCHES "GIT_REPOSITORY [^\n]* GIT_TAG ([^ )\n]+)")
    message(FATAL_ERROR "README.md's FetchContent block names no GIT_REPOSITORY ... GIT_TAG:\n${fetch}")
  endif()
  set(commit "${CMAKE_MATCH_1}")
  string(LENGTH "${commit}" length)
  if(NOT commit MATCHES "^[0-9a-f]+$" OR NOT length EQUAL 40)
    message(FATAL_ERROR "README.md's FetchContent GIT_TAG is `${commit}`: the published repository "
                        "has no tags, so it must be a release commit's full hash")
  endif()
  run(git clone --quiet --no-tags --single-branch "file://${SOURCE}" "${WORK}/repository")
  run(git -C "${WORK}/repository" tag --list)
  if(NOT last_output STREQUAL "")
    message(FATAL_ERROR "the published form has no tags; this clone has: ${last_output}")
  endif()
  execute_process(COMMAND git -C "${WORK}/repository" cat-file -e "${commit}^{commit}"
                  RESULT_VARIABLE missing)
  if(missing)
    execute_process(COMMAND git -C "${SOURCE}" rev-parse --is-shallow-repository
                    OUTPUT_VARIABLE shallow OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(shallow STREQUAL "true")  # CTest reports it skipped (SKIP_REGULAR_EXPRESSION)
      message("fetchcontent-skip: this checkout is shallow and lacks ${commit}: clone the "
              "whole history to check README's FetchContent route")
      return()
    endif()
    message(FATAL_ERROR "README.md's FetchContent commit ${commit} is not in the history of "
                        "this branch, so a user's FetchContent cannot fetch it")
  endif()
  # The release's own quick start, README's FetchContent lines in place of
  # its find_package line.
  run(git -C "${WORK}/repository" show "${commit}:examples/quickstart/main.cpp")
  set(quickstart_main "${WORK}/release_main.cpp")
  file(WRITE "${quickstart_main}" "${last_output}")
  run(git -C "${WORK}/repository" show "${commit}:examples/quickstart/CMakeLists.txt")
  set(lists "${last_output}")
  string(REGEX REPLACE "GIT_REPOSITORY [^\n]* GIT_TAG" "GIT_REPOSITORY file://${WORK}/repository GIT_TAG"
         fetch "${fetch}")
  string(REGEX REPLACE "\nfind_package\\(trainkit [^\n]*" "\n${fetch}" lists "${lists}")
  if(NOT lists MATCHES "FetchContent_Declare")
    message(FATAL_ERROR "the release's examples/quickstart/CMakeLists.txt has no find_package(trainkit ...) line")
  endif()
  string(REGEX REPLACE " -DCMAKE_PREFIX_PATH=[^ ]*" "" command "${quickstart_command}")
  run_quickstart(fetchcontent_release "${lists}" "${command}")
  return()
else()
  message(FATAL_ERROR "unknown MODE ${MODE}")
endif()

run(${configure} -DTRAINKIT_TUNE=${tune} -B "${WORK}/build")
if(MODE STREQUAL "find_package")
  # An installed trainkit decides TRAINKIT_HAS_CUDA from the user's LibTorch,
  # not the packager's: nothing baked in, and a (fake) torch_cuda turns it on.
  file(READ "${prefix}/share/cmake/trainkit/trainkitTargets.cmake" targets)
  if(targets MATCHES "TRAINKIT_HAS_CUDA")
    message(FATAL_ERROR "the installed trainkitTargets.cmake fixes TRAINKIT_HAS_CUDA")
  endif()
  # ... and without COMPONENTS tune, the search is neither loaded nor its
  # SQLite looked for.
  run(${configure} -DTRAINKIT_TUNE=OFF -B "${WORK}/build_cuda" -DTRAINKIT_FAKE_TORCH_CUDA=ON)
  if(NOT last_output MATCHES "trainkit::trainkit defines: [^\n]*TRAINKIT_HAS_CUDA=1")
    message(FATAL_ERROR "find_package(trainkit) next to a torch_cuda target must define "
                        "TRAINKIT_HAS_CUDA=1:\n${last_output}")
  endif()
  file(STRINGS "${WORK}/build_cuda/CMakeCache.txt" sqlite_cache REGEX "^SQLite3_")
  if(NOT last_output MATCHES "trainkit::tune: not defined" OR sqlite_cache)
    message(FATAL_ERROR "find_package(trainkit) without COMPONENTS tune must not load the "
                        "search nor look for SQLite3:\n${last_output}")
  endif()
  if(tune)
    # COMPONENTS tune without SQLite3 fails and says what is missing.
    execute_process(COMMAND ${configure} -DTRAINKIT_TUNE=ON -B "${WORK}/build_no_sqlite"
                            -DCMAKE_DISABLE_FIND_PACKAGE_SQLite3=ON
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(rc EQUAL 0 OR NOT out MATCHES "trainkit::tune needs SQLite3" OR
       NOT out MATCHES "libsqlite3-dev")
      message(FATAL_ERROR "without SQLite3, find_package(trainkit COMPONENTS tune) must fail "
                          "saying trainkit::tune needs it; got (${rc}):\n${out}")
    endif()
    message(STATUS "COMPONENTS tune without SQLite3: failed as expected, naming SQLite3")
  endif()
endif()
run(${CMAKE_COMMAND} --build "${WORK}/build")
run("${WORK}/build/consumer" "${WORK}/events")
message(STATUS "${last_output}")
file(GLOB events "${WORK}/events/events.out.tfevents.*")
if(NOT events)
  message(FATAL_ERROR "the consumer wrote no event file")
endif()
if(tune)
  run("${WORK}/build/consumer_tune" "${WORK}/tune")
  message(STATUS "${last_output}")
endif()
if(MODE STREQUAL "find_package")
  # README's command with its install prefix, /opt/trainkit, replaced by this one
  string(REPLACE "-DCMAKE_PREFIX_PATH=/opt/trainkit" "-DCMAKE_PREFIX_PATH=${prefix}" command
         "${quickstart_command}")
  if(command STREQUAL quickstart_command)
    message(FATAL_ERROR "README's quick start command names no -DCMAKE_PREFIX_PATH=/opt/trainkit")
  endif()
  file(READ "${quickstart}/CMakeLists.txt" lists)
  run_quickstart(quickstart "${lists}" "${command}")
endif()
