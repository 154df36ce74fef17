# kernels/cuda/cuda.cmake — included by kernels/CMakeLists.txt after
# tsr_kernels exists. With a CUDA compiler (and TSR_CUDA ON) it builds the
# CUDA variants as the static library tsr_kernels_cuda, linked PUBLIC into
# tsr_kernels with the shared cudart, cuBLAS and cuSOLVER; without one,
# kernels/cuda_none.c gives the empty variant table. CI (no GPU) thus still
# compiles and links the CUDA code whenever nvcc is installed.
option(TSR_CUDA "Build the CUDA kernel variants when a CUDA compiler is found" ON)
if(TSR_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
endif()

if(NOT TSR_CUDA OR NOT CMAKE_CUDA_COMPILER)
  message(STATUS "tessera: CUDA kernels not built (TSR_CUDA=${TSR_CUDA}, compiler '${CMAKE_CUDA_COMPILER}')")
  target_sources(tsr_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../cuda_none.c)
  set(TSR_HAVE_CUDA OFF)
  return()
endif()

# Ampere and Hopper by default; -DCMAKE_CUDA_ARCHITECTURES=90 builds faster.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80 90 CACHE STRING "CUDA architectures of the kernel variants")
endif()
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
# tsr_kernels was created before the variable existed, so its property was
# initialized empty; a fresh build dir then fails to generate.
set_target_properties(tsr_kernels PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
find_package(CUDAToolkit REQUIRED)
set(TSR_HAVE_CUDA ON)

file(GLOB TSR_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cu)
add_library(tsr_kernels_cuda STATIC ${TSR_CUDA_SOURCES})
set_target_properties(tsr_kernels_cuda PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
# The directory's C warning flags mean nothing to nvcc: hand them (and
# -Werror, sanitizers) to the host compiler instead.
get_target_property(tsr_cuda_dir_opts tsr_kernels_cuda COMPILE_OPTIONS)
set(tsr_cuda_opts --fmad=false)  # no contraction, like -ffp-contract=off on the CPU side
foreach(opt IN LISTS tsr_cuda_dir_opts)
  list(APPEND tsr_cuda_opts "-Xcompiler=${opt}")
endforeach()
set_target_properties(tsr_kernels_cuda PROPERTIES COMPILE_OPTIONS "${tsr_cuda_opts}")
# tsr_kernels for kernels.h, cpu/ops.h and the param helpers (a cycle of
# two static libraries, which CMake links twice over); the host C++
# runtime because C executables link this.
target_link_libraries(tsr_kernels_cuda PUBLIC tsr_kernels tsr_util CUDA::cudart CUDA::cublas CUDA::cusolver stdc++)
target_link_libraries(tsr_kernels PUBLIC tsr_kernels_cuda)
