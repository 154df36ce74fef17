/* tests/fuzz/fuzz_plink.c — libFuzzer target: a PLINK 1 fileset as
 * Tessera reads one. The input holds the .fam, the .bim and the .bed,
 * separated by the line "~~~\n"; they are written to a temporary
 * directory as f.fam, f.bim, f.bed. The client's tsr_plink_info_read
 * (graphs/plink.c) parses the two text files, and every field it returns
 * is read; when it accepts them, the workers' read_bed op
 * (kernels/cpu/plink.c) checks the .bed's magic, mode and size against
 * the counts and reads one chunk (the first up to 64 samples x 64
 * variants), whose bytes are summed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tmp.h"
#include "kernels.h"
#include "tessera/plink.h"
#include "tessera/tessera.h"

static volatile uint64_t sink;

static void use_info(const tsr_plink_info *info)
{
  for (int64_t i = 0; i < info->n_samples; i++) sink += strlen(info->fid[i]) + strlen(info->iid[i]);
  for (int64_t j = 0; j < info->n_variants; j++)
    sink += strlen(info->chrom[j]) + strlen(info->variant_id[j]) + strlen(info->allele1[j]) +
            strlen(info->allele2[j]) + (uint64_t)info->bp[j] + (info->cm[j] == info->cm[j]);
}

static void read_chunk(int64_t n, int64_t m)
{
  char path[128];
  fuzz_path("f.bed", path, sizeof path);
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_str(&p, "path", path, strlen(path));
  static const char *const names[] = {"n_samples", "n_variants", "row0", "rows", "col0", "cols"};
  int64_t v[6] = {n, m, 0, n < 64 ? n : 64, 0, m < 64 ? m : 64};
  for (int i = 0; i < 6; i++) tsr_params_add_int(&p, names[i], v[i]);
  tsr_buf out;
  tsr_errbuf err = {{0}};
  int rc = tsr_op_run_cpu(tsr_op_find("read_bed"), &p, NULL, 0, &out, &err);
  tsr_params_clear(&p);
  if (rc != 0) {
    if (err.text[0] == '\0') abort();  /* every refusal must say why */
    fuzz_say("read_bed", err.text);
    return;
  }
  fuzz_say("read_bed", "accepted");
  for (size_t i = 0; i < out.nbytes; i++) sink += ((const uint8_t *)out.data)[i];
  free(out.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const uint8_t *piece[3];
  size_t len[3];
  if (fuzz_split(data, size, "~~~\n", piece, len, 3) != 3) return 0;
  fuzz_write("f.fam", piece[0], len[0]);
  fuzz_write("f.bim", piece[1], len[1]);
  fuzz_write("f.bed", piece[2], len[2]);
  char prefix[128];
  tsr_plink_info *info = NULL;
  if (tsr_plink_info_read(fuzz_path("f", prefix, sizeof prefix), &info) != 0) {
    if (tsr_errmsg()[0] == '\0') abort();
    fuzz_say("plink_info_read", tsr_errmsg());
    return 0;
  }
  use_info(info);
  read_chunk(info->n_samples, info->n_variants);
  tsr_plink_info_destroy(&info);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  tsr_ops_init(false);
  fuzz_tmp_init();
  return 0;
}
