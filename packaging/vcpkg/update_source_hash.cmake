# vcpkg keys its binary cache (the ABI hash) on the files of the port folder,
# not on the sources, and the overlay port builds from the checkout around it:
# after a pull that changed a header, a reinstall restored the cached package
# with the old headers. So the port folder holds source-hash.txt, a hash of
# every file the port's install reads; when they change, it changes, and vcpkg
# builds afresh.
#   cmake -P packaging/vcpkg/update_source_hash.cmake   rewrites it (after any change)
#   cmake -DCHECK=ON -P ...                              fails if it is out of date
# The check runs as CTest package.vcpkg_source_hash and in the portfile.
get_filename_component(root "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
set(hash_file "${CMAKE_CURRENT_LIST_DIR}/ports/trainkit/source-hash.txt")

# What the port's `cmake --install` reads: the headers, the build and install
# scripts, the license. (CMakeLists.txt also holds test-only lines; hashing them
# too costs a needless rebuild at worst, never a stale package.)
file(GLOB_RECURSE files RELATIVE "${root}" "${root}/include/*" "${root}/cmake/*")
list(APPEND files CMakeLists.txt LICENSE)
list(SORT files)
set(listing "")
foreach(f IN LISTS files)
  file(SHA256 "${root}/${f}" sha)
  string(APPEND listing "${sha}  ${f}\n")
endforeach()
string(SHA256 sha "${listing}")
string(CONCAT content "# Written by packaging/vcpkg/update_source_hash.cmake: SHA-256 of the\n"
                      "# sources this port installs, so that vcpkg's ABI hash follows them.\n"
                      "${sha}\n")

if(CHECK)
  file(READ "${hash_file}" old)
  if(NOT old STREQUAL content)
    message(FATAL_ERROR "packaging/vcpkg/ports/trainkit/source-hash.txt is out of date with "
                        "the sources (vcpkg would serve a cached package built from older "
                        "ones): run `cmake -P packaging/vcpkg/update_source_hash.cmake`.")
  endif()
else()
  file(WRITE "${hash_file}" "${content}")
  message(STATUS "source-hash.txt: ${sha}")
endif()
