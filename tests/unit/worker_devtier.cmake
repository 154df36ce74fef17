# Worker device tier (GPU workers): device chunks moved down to host memory
# or dropped, on a fake device (no GPU, no daemon).
add_executable(test_worker_devtier ${TSR_TESTS_DIR}/unit/test_worker_devtier.c)
target_include_directories(test_worker_devtier PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_worker_devtier PRIVATE tsr_workerlib)
add_test(NAME unit.worker_devtier COMMAND test_worker_devtier)
set_tests_properties(unit.worker_devtier PROPERTIES LABELS unit TIMEOUT 60)
