# The bounded k-means ops (kernels/cpu/kmeans_step.c): every iteration's
# labels equal plain Lloyd's (kmeans_partial); --bench times the steps.
add_executable(test_kernels_kmeans ${TSR_TESTS_DIR}/unit/test_kernels_kmeans.c)
target_include_directories(test_kernels_kmeans PRIVATE ${TSR_TESTS_DIR} ${PROJECT_SOURCE_DIR}/kernels)
target_link_libraries(test_kernels_kmeans PRIVATE tsr_kernels m)
add_test(NAME unit.kernels_kmeans COMMAND test_kernels_kmeans)
set_tests_properties(unit.kernels_kmeans PROPERTIES LABELS unit TIMEOUT 120)
