# What the fuzz targets found (tests/fuzz/regressions), as plain unit tests
# run in every build, ASan's included: no clang needed.
add_executable(test_fuzz_regressions ${TSR_TESTS_DIR}/unit/test_fuzz_regressions.c)
target_include_directories(test_fuzz_regressions PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_fuzz_regressions PRIVATE tsr_sched_fixtures)
target_compile_definitions(test_fuzz_regressions PRIVATE TSR_FUZZ_REGRESSIONS="${TSR_TESTS_DIR}/fuzz/regressions")
add_test(NAME unit.fuzz_regressions COMMAND test_fuzz_regressions)
set_tests_properties(unit.fuzz_regressions PROPERTIES LABELS unit TIMEOUT 60)

add_executable(test_fuzz_regressions_worker ${TSR_TESTS_DIR}/unit/test_fuzz_regressions_worker.c)
target_include_directories(test_fuzz_regressions_worker PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_fuzz_regressions_worker PRIVATE tsr_workerlib)
add_test(NAME unit.fuzz_regressions_worker COMMAND test_fuzz_regressions_worker)
set_tests_properties(unit.fuzz_regressions_worker PROPERTIES LABELS unit TIMEOUT 60)
