# Test of the installed package (run with cmake -P; see tests/unit/client.cmake):
# installs the `devel` component of BUILD_DIR into a temporary prefix, then
# builds and runs a tiny consumer three ways: find_package(Tessera) with the
# shared and the static target, and pkg-config (shared and --static).
#   -DBUILD_DIR=... -DWORK_DIR=... -DC_COMPILER=... [-DGENERATOR=...]
#   [-DCONSUMER_FLAGS="-fsanitize=..."] (compile and link flags of the consumers)
cmake_minimum_required(VERSION 3.20)
foreach(v BUILD_DIR WORK_DIR C_COMPILER)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "TesseraInstallTest: -D${v}= is required")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  set(LAST_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(PREFIX ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} --component devel)
foreach(f include/tessera/tessera.h include/tessera/base.h include/tessera/zarr.h include/tessera/plink.h
    include/tessera/tenx.h)
  if(NOT EXISTS ${PREFIX}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

set(SRC ${WORK_DIR}/consumer)
file(WRITE ${SRC}/main.c [=[
#include <stdio.h>
#include <string.h>
#include <tessera/plink.h>
#include <tessera/tenx.h>
#include <tessera/tessera.h>
#include <tessera/zarr.h>

int main(void)
{
  /* Links the Zarr builders (and jansson, for the static archive). */
  tsr_array *z = NULL;
  if (tsr_from_zarr(NULL, "x", &z) != TSR_EINVAL) return 4;
  tsr_plink_info *info = NULL;
  tsr_plink_info_destroy(&info);  /* the reader's header installs and links */
  tsr_array *x = NULL;               /* and the 10x readers (libhdf5, zlib) */
  if (tsr_from_10x_h5(NULL, "x.h5", 0, &x, NULL) != TSR_EINVAL) return 5;
  if (tsr_from_mtx(NULL, "x.mtx", 0, &x, NULL) != TSR_EINVAL) return 6;
  if (strcmp(tsr_strerror(TSR_ETASK), "a task failed (see the future's error message)") != 0) return 1;
  tsr_args *a = NULL;
  if (tsr_args_new(&a) != 0 || tsr_args_int(a, "seed", 5) != 0) return 2;
  size_t len = 0;
  const unsigned char *p = tsr_args_data(a, &len);
  /* {"seed": 5} = 81 a4 's' 'e' 'e' 'd' 05 */
  const unsigned char want[] = {0x81, 0xa4, 's', 'e', 'e', 'd', 0x05};
  int ok = len == sizeof want && memcmp(p, want, len) == 0;
  tsr_args_destroy(&a);
  if (!ok) return 3;
  printf("consumer ok: %s\n", tsr_err_name(TSR_ECONN));
  return 0;
}
]=])
file(WRITE ${SRC}/CMakeLists.txt [=[
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(Tessera 0.1 REQUIRED)
add_executable(app_shared main.c)
target_link_libraries(app_shared PRIVATE Tessera::tessera)
add_executable(app_static main.c)
target_link_libraries(app_static PRIVATE Tessera::tessera_static)
]=])

# 1. find_package
set(gen "")
if(DEFINED GENERATOR AND NOT GENERATOR STREQUAL "")
  set(gen -G ${GENERATOR})
endif()
separate_arguments(cflags UNIX_COMMAND "${CONSUMER_FLAGS}")
run(${CMAKE_COMMAND} -S ${SRC} -B ${WORK_DIR}/consumer-build ${gen} -DCMAKE_PREFIX_PATH=${PREFIX}
    -DCMAKE_C_COMPILER=${C_COMPILER} "-DCMAKE_C_FLAGS=${CONSUMER_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_FLAGS}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
run(${WORK_DIR}/consumer-build/app_shared)
message(STATUS "find_package, shared: ${LAST_OUTPUT}")
run(${WORK_DIR}/consumer-build/app_static)
message(STATUS "find_package, static: ${LAST_OUTPUT}")

# 2. pkg-config
find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
file(GLOB_RECURSE pcs ${PREFIX}/*/tessera.pc)
list(LENGTH pcs npcs)
if(NOT npcs EQUAL 1)
  message(FATAL_ERROR "expected one installed tessera.pc, found: ${pcs}")
endif()
get_filename_component(pcdir ${pcs} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pcdir}")
run(${PKG_CONFIG} --cflags --libs tessera)
string(STRIP "${LAST_OUTPUT}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${C_COMPILER} ${cflags} ${SRC}/main.c ${flags} -o ${WORK_DIR}/app_pc)
run(${PKG_CONFIG} --variable=libdir tessera)
string(STRIP "${LAST_OUTPUT}" libdir)
set(ENV{LD_LIBRARY_PATH} "${libdir}")
run(${WORK_DIR}/app_pc)
message(STATUS "pkg-config, shared: ${LAST_OUTPUT}")
run(${PKG_CONFIG} --static --cflags --libs tessera)
string(STRIP "${LAST_OUTPUT}" sflags)
separate_arguments(sflags UNIX_COMMAND "${sflags}")
list(TRANSFORM sflags REPLACE "^-ltessera$" "${libdir}/libtessera.a")
run(${C_COMPILER} ${cflags} ${SRC}/main.c ${sflags} -o ${WORK_DIR}/app_pc_static)
unset(ENV{LD_LIBRARY_PATH})
run(${WORK_DIR}/app_pc_static)
message(STATUS "pkg-config, static: ${LAST_OUTPUT}")
file(REMOVE_RECURSE ${WORK_DIR})
