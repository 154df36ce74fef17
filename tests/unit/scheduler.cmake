# Scheduler tests. unit.scheduler: state, transitions and policies linked
# from tsr_sched, no sockets. integration.scheduler_proto: the real
# tessera-scheduler binary driven over ZeroMQ by fake workers and clients.
add_executable(test_scheduler_proto ${TSR_TESTS_DIR}/unit/test_scheduler_proto.c)
target_include_directories(test_scheduler_proto PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_scheduler_proto PRIVATE tsr_common)
target_compile_definitions(test_scheduler_proto PRIVATE TSR_SCHED_BIN="$<TARGET_FILE:tessera-scheduler>")
add_dependencies(test_scheduler_proto tessera-scheduler)
add_test(NAME integration.scheduler_proto COMMAND test_scheduler_proto)
set_tests_properties(integration.scheduler_proto PROPERTIES LABELS integration TIMEOUT 120)

add_executable(test_scheduler ${TSR_TESTS_DIR}/unit/test_scheduler.c)
target_include_directories(test_scheduler PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_scheduler PRIVATE tsr_sched_fixtures)
add_test(NAME unit.scheduler COMMAND test_scheduler)
set_tests_properties(unit.scheduler PROPERTIES LABELS unit TIMEOUT 120)

add_executable(test_fuse ${TSR_TESTS_DIR}/unit/test_fuse.c)
target_include_directories(test_fuse PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_fuse PRIVATE tsr_sched_fixtures)
add_test(NAME unit.fuse COMMAND test_fuse)
set_tests_properties(unit.fuse PROPERTIES LABELS unit TIMEOUT 120)

# The placement and departure indexes against a scan of every worker, on a
# random run with 44 workers (pause, departure, join), and the placed
# lists' size under churn.
add_executable(test_scheduler_scale ${TSR_TESTS_DIR}/unit/test_scheduler_scale.c)
target_include_directories(test_scheduler_scale PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_scheduler_scale PRIVATE tsr_sched_fixtures)
add_test(NAME unit.scheduler_scale COMMAND test_scheduler_scale)
set_tests_properties(unit.scheduler_scale PROPERTIES LABELS unit TIMEOUT 60)
