# Worker tests: unit (store, decoder, queue, executor; no daemon) and the
# protocol test that drives the real tessera-worker against a fake
# scheduler played by the test itself.
add_executable(test_worker ${TSR_TESTS_DIR}/unit/test_worker.c)
target_include_directories(test_worker PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_worker PRIVATE tsr_workerlib)
add_test(NAME unit.worker COMMAND test_worker)
set_tests_properties(unit.worker PROPERTIES LABELS unit TIMEOUT 60)

add_executable(test_worker_proto ${TSR_TESTS_DIR}/unit/test_worker_proto.c)
target_include_directories(test_worker_proto PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_worker_proto PRIVATE tsr_common)
add_dependencies(test_worker_proto tessera-worker)
add_test(NAME integration.worker_proto COMMAND test_worker_proto $<TARGET_FILE:tessera-worker>)
set_tests_properties(integration.worker_proto PROPERTIES LABELS integration TIMEOUT 120 RUN_SERIAL ON)

add_executable(test_worker_fused ${TSR_TESTS_DIR}/unit/test_worker_fused.c)
target_include_directories(test_worker_fused PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_worker_fused PRIVATE tsr_workerlib)
add_test(NAME unit.worker_fused COMMAND test_worker_fused)
set_tests_properties(unit.worker_fused PROPERTIES LABELS unit TIMEOUT 60)
