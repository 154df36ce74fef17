# The Matrix Market line parser (common/util/mtx.c), canonical CSR rows
# (kernels/cpu/csr_build.c) and mtx_read on small files: byte ranges,
# the transpose, files changed after the scan, refused params.
add_executable(test_kernels_tenx ${TSR_TESTS_DIR}/unit/test_kernels_tenx.c)
target_include_directories(test_kernels_tenx PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_kernels_tenx PRIVATE tsr_kernels)
add_test(NAME unit.kernels_tenx COMMAND test_kernels_tenx)
set_tests_properties(unit.kernels_tenx PROPERTIES LABELS unit TIMEOUT 60)
