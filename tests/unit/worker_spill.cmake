# Worker memory tiers: spill files (blosc, checksums, corruption) and the
# LRU eviction of the store (drop vs spill, pinning, reload), no daemon.
add_executable(test_worker_spill ${TSR_TESTS_DIR}/unit/test_worker_spill.c)
target_include_directories(test_worker_spill PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_worker_spill PRIVATE tsr_workerlib)
add_test(NAME unit.worker_spill COMMAND test_worker_spill)
set_tests_properties(unit.worker_spill PROPERTIES LABELS unit TIMEOUT 120)
