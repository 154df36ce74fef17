# unit.report — rendering saved efficiency reports: escaping, refused
# documents, unwritable outputs, the text summary (docs/report.md). Public
# API of libtessera only.
add_executable(test_report ${TSR_TESTS_DIR}/unit/test_report.c)
target_include_directories(test_report PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_report PRIVATE tessera)
add_test(NAME unit.report COMMAND test_report)
set_tests_properties(unit.report PROPERTIES LABELS unit TIMEOUT 60)
