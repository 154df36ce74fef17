# Zarr chunk ops and their codecs (kernels/cpu/codecs.c, zarr_*.c): round
# trips, corrupt and oversized input, shards, edge chunks, fill values.
add_executable(test_kernels_zarr ${TSR_TESTS_DIR}/unit/test_kernels_zarr.c)
target_include_directories(test_kernels_zarr PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_kernels_zarr PRIVATE tsr_kernels)
add_test(NAME unit.kernels_zarr COMMAND test_kernels_zarr)
set_tests_properties(unit.kernels_zarr PROPERTIES LABELS unit TIMEOUT 60)
