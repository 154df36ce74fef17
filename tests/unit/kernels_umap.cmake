# UMAP ops (kernels/cpu/umap.c, umap_spectral.c) on pbmc68k_reduced against
# umap-learn's values stored in tests/data/umap.
add_executable(test_kernels_umap ${TSR_TESTS_DIR}/unit/test_kernels_umap.c)
target_include_directories(test_kernels_umap PRIVATE ${TSR_TESTS_DIR})
get_filename_component(TSR_PBMC_DATA_DIR ${PROJECT_SOURCE_DIR}/../shared/data/pbmc68k_reduced_10x ABSOLUTE)
target_compile_definitions(test_kernels_umap PRIVATE TSR_PBMC_DATA="${TSR_PBMC_DATA_DIR}"
  TSR_UMAP_FIXTURES="${TSR_TESTS_DIR}/data/umap")
target_link_libraries(test_kernels_umap PRIVATE tsr_kernels m)
add_test(NAME unit.kernels_umap COMMAND test_kernels_umap)
set_tests_properties(unit.kernels_umap PROPERTIES LABELS unit TIMEOUT 120)
