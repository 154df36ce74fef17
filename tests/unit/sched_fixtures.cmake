# The scheduler unit tests' shared fixtures (sched_fixtures.h): one static
# library, so test_scheduler, test_scheduler_mem, test_scheduler_evict and
# test_fuse build on one copy. It brings tsr_sched with it.
add_library(tsr_sched_fixtures STATIC ${TSR_TESTS_DIR}/unit/sched_fixtures.c)
target_include_directories(tsr_sched_fixtures PUBLIC ${TSR_TESTS_DIR}/unit)
target_link_libraries(tsr_sched_fixtures PUBLIC tsr_sched)
