# The limits on sizes from outside (common/util/limits.c, scheduler/limits.c):
# settings, and each scheduler limit refusing by name, on synthetic states.
add_executable(test_limits ${TSR_TESTS_DIR}/unit/test_limits.c)
target_include_directories(test_limits PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_limits PRIVATE tsr_sched_fixtures)
add_test(NAME unit.limits COMMAND test_limits)
set_tests_properties(unit.limits PROPERTIES LABELS unit TIMEOUT 60)
