# http/ (the daemons' HTTP server, snapshot board, Prometheus text): address
# parsing, label escaping, histograms, the board's hand-over, and a real
# server on a free loopback port answering routes, 404 and 405.
add_executable(test_http ${TSR_TESTS_DIR}/unit/test_http.c)
target_include_directories(test_http PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_http PRIVATE tsr_http)
add_test(NAME unit.http COMMAND test_http)
set_tests_properties(unit.http PROPERTIES LABELS unit TIMEOUT 60)
