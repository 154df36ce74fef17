# Scheduler memory policies on synthetic states, no sockets: paused
# workers get no tasks, root tasks are handed out only as slots free.
add_executable(test_scheduler_mem ${TSR_TESTS_DIR}/unit/test_scheduler_mem.c)
target_include_directories(test_scheduler_mem PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_scheduler_mem PRIVATE tsr_sched_fixtures)
add_test(NAME unit.scheduler_mem COMMAND test_scheduler_mem)
set_tests_properties(unit.scheduler_mem PROPERTIES LABELS unit TIMEOUT 60)
