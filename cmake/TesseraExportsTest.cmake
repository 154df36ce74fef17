cmake_minimum_required(VERSION 3.20)
# Checks the dynamic symbol table of libtessera.so (run with cmake -P):
# every defined export starts with tsr_ and is declared in a public header,
# and every function of tessera.h/base.h is there.
#   -DLIB=path/libtessera.so -DNM=nm -DWANT="tsr_a;tsr_b;..."
execute_process(COMMAND ${NM} -D --defined-only ${LIB} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${LIB}")
endif()
string(REGEX MATCHALL "[0-9a-f]+ [TDBRVW] [A-Za-z0-9_]+" lines "${out}")
set(have "")
foreach(l ${lines})
  string(REGEX REPLACE ".* " "" name "${l}")
  list(APPEND have ${name})
  if(NOT name MATCHES "^tsr_" OR NOT name IN_LIST WANT)
    message(SEND_ERROR "libtessera.so exports '${name}', which no public header declares")
  endif()
endforeach()
foreach(name tsr_errmsg tsr_strerror tsr_err_name tsr_dtype_size tsr_dtype_name tsr_dtype_parse tsr_client_open
        tsr_client_close tsr_submit tsr_future_wait tsr_gather tsr_args_new tsr_graph_add tsr_cluster_info_get
        tsr_wait_for_workers)
  if(NOT name IN_LIST have)
    message(SEND_ERROR "libtessera.so does not export '${name}'")
  endif()
endforeach()
list(LENGTH have n)
message(STATUS "libtessera.so exports ${n} functions, all public")
