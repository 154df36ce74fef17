# plot (plot/plot.h): the embedding PNG read back with cairo.
add_executable(test_plot ${TSR_TESTS_DIR}/unit/test_plot.c)
target_include_directories(test_plot PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_plot PRIVATE tsr_plot)
add_test(NAME unit.plot COMMAND test_plot)
set_tests_properties(unit.plot PROPERTIES LABELS unit TIMEOUT 120)
