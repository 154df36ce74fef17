# The plain-C emulation of the CUDA umap_spectral variant (kernels/cpu/
# umap_spectral.h) against the CPU op: runs everywhere, no GPU needed.
add_executable(test_umap_spectral_par ${TSR_TESTS_DIR}/unit/test_umap_spectral_par.c)
target_include_directories(test_umap_spectral_par PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_umap_spectral_par PRIVATE tsr_kernels m)
add_test(NAME unit.umap_spectral_par COMMAND test_umap_spectral_par)
set_tests_properties(unit.umap_spectral_par PROPERTIES LABELS unit TIMEOUT 120)
