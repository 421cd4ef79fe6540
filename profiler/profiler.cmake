# profiler.cmake -- included by the top CMakeLists.txt.
#
# ap_profile_core: the GPU-free half of the profiler (options, grids,
# statistics, bandwidth conventions, the cluster file); always built, so that
# its tests run on machines without CUDA.
#
# ap_profiler: the measuring half (profiler/gpu_*.c: CUDA runtime, cuBLAS,
# cuBLASLt for the FP8 GEMMs, NCCL, and MPI when found); defined only when
# AP_PROFILER is ON and the CUDA toolkit, cuBLAS and NCCL are all found
# (CUDA::cublasLt comes with CUDA::cublas). Plain C against the runtime API: no
# nvcc and no CUDA language are needed.

file(GLOB AP_PROFILE_ALL_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/profiler/*.c)
set(AP_PROFILE_CORE_SRC ${AP_PROFILE_ALL_SRC})
list(FILTER AP_PROFILE_CORE_SRC EXCLUDE REGEX "/gpu_[^/]*\\.c$")
add_library(ap_profile_core STATIC ${AP_PROFILE_CORE_SRC})
target_link_libraries(ap_profile_core PUBLIC ap_costmodel m)

if(AP_PROFILER)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_path(AP_NCCL_INCLUDE_DIR nccl.h
      HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME
      PATH_SUFFIXES include)
    find_library(AP_NCCL_LIBRARY nccl
      HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME
      PATH_SUFFIXES lib lib64)
  endif()
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND AP_NCCL_INCLUDE_DIR AND AP_NCCL_LIBRARY)
    file(GLOB AP_PROFILE_GPU_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/profiler/gpu_*.c)
    find_package(MPI QUIET COMPONENTS C)
    if(NOT MPI_C_FOUND)
      list(FILTER AP_PROFILE_GPU_SRC EXCLUDE REGEX "/gpu_mpi\\.c$")
    endif()
    add_library(ap_profiler STATIC ${AP_PROFILE_GPU_SRC})
    target_include_directories(ap_profiler PRIVATE ${AP_NCCL_INCLUDE_DIR})
    target_link_libraries(ap_profiler PUBLIC ap_profile_core CUDA::cudart CUDA::cublas
                          CUDA::cublasLt ${AP_NCCL_LIBRARY})
    target_compile_definitions(ap_profiler PUBLIC AP_HAVE_PROFILER=1)
    if(MPI_C_FOUND)
      target_link_libraries(ap_profiler PUBLIC MPI::MPI_C)
      target_compile_definitions(ap_profiler PRIVATE AP_HAVE_MPI=1)
    endif()
    message(STATUS "autopar profile: CUDA ${CUDAToolkit_VERSION}, NCCL ${AP_NCCL_LIBRARY}, MPI ${MPI_C_FOUND}")
  else()
    message(STATUS "autopar profile: not built (needs the CUDA toolkit, cuBLAS and NCCL)")
  endif()
endif()
