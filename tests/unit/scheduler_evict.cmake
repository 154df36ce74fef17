# The recompute-vs-spill policy and deferred recomputation on synthetic
# scheduler states, no sockets (scheduler/policy_evict.c, transitions.c).
add_executable(test_scheduler_evict ${TSR_TESTS_DIR}/unit/test_scheduler_evict.c)
target_include_directories(test_scheduler_evict PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_scheduler_evict PRIVATE tsr_sched_fixtures)
add_test(NAME unit.scheduler_evict COMMAND test_scheduler_evict)
set_tests_properties(unit.scheduler_evict PROPERTIES LABELS unit TIMEOUT 120)
