# The plain-C emulation of the CUDA community variant (kernels/cpu/
# community_par.h) against the CPU op: runs everywhere, no GPU needed.
add_executable(test_community_par ${TSR_TESTS_DIR}/unit/test_community_par.c)
target_include_directories(test_community_par PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_community_par PRIVATE tsr_kernels m)
add_test(NAME unit.community_par COMMAND test_community_par)
set_tests_properties(unit.community_par PROPERTIES LABELS unit TIMEOUT 120)
