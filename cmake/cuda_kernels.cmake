# trainkit::cuda_kernels: the kernels no header can give a C++ compiler
# (fused batch norm + activation), compiled by nvcc once. A program that links
# it gets TRAINKIT_HAS_FUSED_KERNELS, which turns their use on in the headers;
# one that does not still builds and runs the same math as ATen operations.
# nvcc with the C++ compiler the rest of the program builds with (set before
# the check, which tries that pair: a compiler nvcc does not take means no
# kernels, not a failed configure); the GPU of this machine unless the user
# names architectures. Build-tree targets only: an installed trainkit ships
# the kernels' source for a .cu file of the user's (docs/design.md).
if(NOT CMAKE_CUDA_HOST_COMPILER)
  set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "trainkit: no CUDA compiler that takes ${CMAKE_CUDA_HOST_COMPILER}: no "
                 "trainkit::cuda_kernels (fused kernels; -DTRAINKIT_CUDA_KERNELS=OFF silences this)")
  return()
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES native)
endif()
enable_language(CUDA)
add_library(trainkit_cuda_kernels STATIC "${PROJECT_SOURCE_DIR}/src/cuda_kernels.cu")
add_library(trainkit::cuda_kernels ALIAS trainkit_cuda_kernels)
# The shared CUDA runtime: the one LibTorch loads (one runtime per process).
set_target_properties(trainkit_cuda_kernels PROPERTIES
  CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON
  CUDA_RUNTIME_LIBRARY Shared)
target_include_directories(trainkit_cuda_kernels PRIVATE "${PROJECT_SOURCE_DIR}/include")
target_compile_options(trainkit_cuda_kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
target_compile_definitions(trainkit_cuda_kernels INTERFACE TRAINKIT_HAS_FUSED_KERNELS=1)
target_link_libraries(trainkit_cuda_kernels INTERFACE trainkit)
