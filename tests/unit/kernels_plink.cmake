# read_bed (kernels/cpu/plink.c): the PLINK .bed transpose and remap
# against a reference, the op on small files, refused files and params.
add_executable(test_kernels_plink ${TSR_TESTS_DIR}/unit/test_kernels_plink.c)
target_include_directories(test_kernels_plink PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_kernels_plink PRIVATE tsr_kernels)
add_test(NAME unit.kernels_plink COMMAND test_kernels_plink)
set_tests_properties(unit.kernels_plink PROPERTIES LABELS unit TIMEOUT 60)
