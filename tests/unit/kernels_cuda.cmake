# The CUDA variants' tests, only when kernels/cuda was built (a CUDA
# compiler was found). gpu.kernels_cuda needs a GPU and exits 77 (shown as
# skipped) without one; unit.kernels_2bit checks the CPU side of the 2-bit
# ops and runs everywhere. `test_kernels_cuda --bench` holds the
# measurements of docs/kernels-cuda.md.
if(TARGET tsr_kernels_cuda)
  add_library(tsr_gpu_kit STATIC ${TSR_TESTS_DIR}/unit/gpu_kit.c)
  target_include_directories(tsr_gpu_kit PUBLIC ${TSR_TESTS_DIR}/unit)
  target_link_libraries(tsr_gpu_kit PUBLIC tsr_kernels)  # brings cudart, cuBLAS, cuSOLVER
  add_executable(test_kernels_cuda ${TSR_TESTS_DIR}/unit/test_kernels_cuda.c)
  target_include_directories(test_kernels_cuda PRIVATE ${TSR_TESTS_DIR})
  target_link_libraries(test_kernels_cuda PRIVATE tsr_gpu_kit)
  add_test(NAME gpu.kernels_cuda COMMAND test_kernels_cuda)
  set_tests_properties(gpu.kernels_cuda PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77)
  add_test(NAME unit.kernels_2bit COMMAND test_kernels_cuda --cpu)
  set_tests_properties(unit.kernels_2bit PROPERTIES LABELS unit TIMEOUT 120)
  # whole-slide ops (kernels/cuda/tiles.cu: nvJPEG, tile statistics) on the
  # real slide region of ../shared/data/wsi_cmu1_small_region
  get_filename_component(tsr_wsi_dir ${PROJECT_SOURCE_DIR}/../shared/data/wsi_cmu1_small_region ABSOLUTE)
  add_executable(test_tiles_cuda ${TSR_TESTS_DIR}/unit/test_tiles_cuda.c)
  target_include_directories(test_tiles_cuda PRIVATE ${TSR_TESTS_DIR})
  target_link_libraries(test_tiles_cuda PRIVATE tsr_gpu_kit)
  target_compile_definitions(test_tiles_cuda PRIVATE TSR_WSI_DIR="${tsr_wsi_dir}")
  add_test(NAME gpu.tiles_cuda COMMAND test_tiles_cuda)
  set_tests_properties(gpu.tiles_cuda PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
