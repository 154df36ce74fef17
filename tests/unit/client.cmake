# libtessera tests.
# unit.client         — args, graph building, connection failures (no server)
# integration.client_proto — the client against a fake scheduler and a fake
#                            worker data socket, both inside the test
add_executable(test_client ${TSR_TESTS_DIR}/unit/test_client.c)
target_include_directories(test_client PRIVATE ${TSR_TESTS_DIR})
target_link_libraries(test_client PRIVATE tessera ${TSR_MSGPACK})
add_test(NAME unit.client COMMAND test_client)
set_tests_properties(unit.client PROPERTIES LABELS unit TIMEOUT 60)

# unit.client_reconnect — the reconnect window's clock, on the client's
# internals (the static library exports them)
add_executable(test_client_reconnect ${TSR_TESTS_DIR}/unit/test_client_reconnect.c)
target_include_directories(test_client_reconnect PRIVATE ${TSR_TESTS_DIR} ${PROJECT_SOURCE_DIR}/client)
target_link_libraries(test_client_reconnect PRIVATE tessera_static)
add_test(NAME unit.client_reconnect COMMAND test_client_reconnect)
set_tests_properties(unit.client_reconnect PROPERTIES LABELS unit TIMEOUT 60)

add_executable(test_client_proto ${TSR_TESTS_DIR}/unit/test_client_proto.c)
target_include_directories(test_client_proto PRIVATE ${TSR_TESTS_DIR})
# tsr_common for the fake scheduler's wire code; libtessera (shared) keeps
# its own copy hidden, so the two never mix.
target_link_libraries(test_client_proto PRIVATE tessera tsr_common)
add_test(NAME integration.client_proto COMMAND test_client_proto)
set_tests_properties(integration.client_proto PROPERTIES LABELS integration TIMEOUT 120)

# The installed package: find_package(Tessera) and pkg-config consumers.
# A sanitized build installs instrumented objects: consumers then need the
# sanitizer runtime too.
set(TSR_CONSUMER_FLAGS "")
if(TSR_SANITIZE)
  set(TSR_CONSUMER_FLAGS "-fsanitize=address,undefined")
endif()
add_test(NAME unit.client_install
  COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/client-install-test
          -DC_COMPILER=${CMAKE_C_COMPILER} -DGENERATOR=${CMAKE_GENERATOR} "-DCONSUMER_FLAGS=${TSR_CONSUMER_FLAGS}"
          -P ${PROJECT_SOURCE_DIR}/cmake/TesseraInstallTest.cmake)
set_tests_properties(unit.client_install PROPERTIES LABELS unit TIMEOUT 300)

# libtessera.so exports exactly the functions of the public headers.
add_test(NAME unit.client_exports
  COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:tessera> -DNM=${CMAKE_NM} "-DWANT=${TSR_CLIENT_EXPORTS}"
          -P ${PROJECT_SOURCE_DIR}/cmake/TesseraExportsTest.cmake)
set_tests_properties(unit.client_exports PROPERTIES LABELS unit TIMEOUT 60)
