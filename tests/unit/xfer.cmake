# unit.xfer: the data plane's transports (common/net/xfer*.c), UCX and
# ZeroMQ on loopback, with a peer process SIGKILLed mid-fetch. Without
# UCX in the build it exits 77 (skipped, with the reason).
add_executable(test_xfer ${TSR_TESTS_DIR}/unit/test_xfer.c)
target_include_directories(test_xfer PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_xfer PRIVATE tsr_common)
add_test(NAME unit.xfer COMMAND test_xfer)
set_tests_properties(unit.xfer PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
