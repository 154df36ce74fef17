/* common/util/npy.h — the NumPy .npy header (format 1.0/2.0/3.0): parse it
 * to learn dtype, shape and where the data starts; write one for a C-order
 * little-endian array. Shared by the load/save kernels and by the client's
 * tsr_from_npy, which reads only the header. */
#ifndef TSR_COMMON_NPY_H
#define TSR_COMMON_NPY_H

#include <stdio.h>

#include "util.h"

typedef struct tsr_npy_info {
  tsr_meta meta;
  uint64_t data_offset;   /* bytes before the first element */
} tsr_npy_info;

/* Parses the header of an open file (position is left after the header).
 * Accepts descr '<u1' '|u1' '<i4' '<i8' '<f4' '<f8' and fortran_order False.
 * Errors: TSR_EIO (short read), TSR_EINVAL (not an .npy file, or an
 * unsupported dtype, byte order or Fortran order: the message names it). */
int tsr_npy_parse(FILE *f, tsr_npy_info *info, tsr_errbuf *err);
/* Opens path and parses its header; TSR_EIO names the path and errno. */
int tsr_npy_read_header(const char *path, tsr_npy_info *info, tsr_errbuf *err);
/* Writes a version 1.0 header (padded to 64 bytes) for meta. 0 or TSR_EIO. */
int tsr_npy_write_header(FILE *f, const tsr_meta *meta, tsr_errbuf *err);

#endif
