/* unit.report — rendering saved efficiency reports (tessera/report.h,
 * docs/report.md) without a cluster: strings from the document are escaped
 * in the page (a hostile op name cannot inject markup or close the embedded
 * JSON), a document missing a field or not JSON at all is refused with a
 * message naming the file and the field, an unwritable output names its
 * path, and the text summary carries the verdict and the ops. The recorder
 * itself runs against real daemons in integration.report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kit.h"
#include "tessera/report.h"

static char dir[] = "/tmp/tsr_test_report_XXXXXX";

#define NO_GPU "\"gpu_util\": [null, null, null], \"gpu_memory_used\": [null, null, null]"

/* A minimal version-1 document; `omit` names a top-level field left out;
 * gpu holds the samples' two GPU series (NO_GPU: none reported). */
static void write_doc(const char *path, const char *program, const char *op, const char *omit, const char *gpu)
{
  FILE *f = fopen(path, "w");
  fprintf(f, "{\"tessera_report\": 1, \"program\": \"%s\", \"command\": \"x --report r.html\", \"started\": \"2026-11-24T00:00:00Z\","
             " \"wall_s\": 2.5, \"exit_status\": 0", program);
  const char *parts[][2] = {
    {"tasks", "{\"graphs\": 1, \"total\": 10, \"done\": 10, \"erred\": 0, \"bytes_done\": 1000, \"busy_s\": 4.0}"},
    {"ops", NULL},
    {"workers", "[{\"name\": \"w<1>\", \"device\": \"cpu\", \"threads\": 2, \"tasks_done\": 10, \"cpu_s\": 4.5,"
                " \"cpu_efficiency\": 0.9, \"memory_peak\": 100, \"memory_efficiency\": null, \"fetch_bytes\": 0}]"},
    {"efficiency", "{\"cpu\": 0.9, \"busy\": 0.8}"},
    {"tiers", "{\"host\": {\"peak\": 100, \"limit\": null, \"efficiency\": null}, \"disk\": {\"peak\": 0}, \"device\": {\"peak\": 0}}"},
    {"data", "{\"bytes_made\": 1000, \"bytes_fetched\": 0, \"fetch_s\": 0}"},
    {"samples", NULL},
    {"bound", "{\"by\": \"compute\", \"fractions\": {\"compute\": 0.8, \"transfer\": 0.1, \"idle\": 0.1}, \"spill_ratio\": 0,"
              " \"evidence\": [\"compute: 80% & more\"]}"}};
  for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
    if (omit != NULL && strcmp(parts[k][0], omit) == 0) continue;
    if (parts[k][1] != NULL) fprintf(f, ", \"%s\": %s", parts[k][0], parts[k][1]);
    else if (strcmp(parts[k][0], "ops") == 0)
      fprintf(f, ", \"ops\": [{\"op\": \"%s\", \"tasks\": 10, \"busy_s\": 4.0, \"bytes\": 1000}]", op);
    else
      fprintf(f, ", \"samples\": {\"t\": [0, 1, 2], \"memory_used\": [0, 50, 100], \"disk_bytes\": [0, 0, 0],"
                 " \"device_memory_used\": [0, 0, 0], \"cpu_util\": [null, 80, 90], %s}", gpu);
  }
  fprintf(f, "}\n");
  fclose(f);
}

static char *slurp(const char *path)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static size_t count(const char *hay, const char *needle)
{
  size_t n = 0;
  for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) n++;
  return n;
}

TEST(html_escapes_the_documents_strings)
{
  char in[256], out[256], err[512] = "";
  snprintf(in, sizeof in, "%s/r.json", dir);
  snprintf(out, sizeof out, "%s/r.html", dir);
  write_doc(in, "<script>alert(1)</script>", "a<b&c</script>", NULL, NO_GPU);
  ASSERT_OK(tsr_report_render(in, TSR_REPORT_HTML, out, err, sizeof err));
  const char *html = slurp(out);
  ASSERT_TRUE(html != NULL);
  ASSERT_CONTAINS(html, "&lt;script&gt;alert(1)&lt;/script&gt;");
  ASSERT_CONTAINS(html, ">a&lt;b&amp;c&lt;/script&gt;</text>");   /* the op's bar label */
  ASSERT_CONTAINS(html, "<td>w&lt;1&gt;</td>");
  ASSERT_TRUE(strstr(html, "<script>alert") == NULL);
  /* one <script> element (the embedded JSON), closed once: its '<' are written \u003c */
  ASSERT_EQ(count(html, "<script"), 1);
  ASSERT_EQ(count(html, "</script>"), 1);
  ASSERT_CONTAINS(html, "\\u003cscript>alert(1)\\u003c/script>");
  for (const char *id = "summary\0bound\0ops\0timeline\0workers\0data\0"; *id; id += strlen(id) + 1) {
    char want[64];
    snprintf(want, sizeof want, "<section id='%s'>", id);
    ASSERT_CONTAINS(html, want);
  }
}

/* GPU samples (NVML through heartbeats) get their plots; without them the page says so. */
TEST(gpu_samples_are_plotted_when_present)
{
  char in[256], out[256], err[512] = "";
  snprintf(in, sizeof in, "%s/g.json", dir);
  snprintf(out, sizeof out, "%s/g.html", dir);
  write_doc(in, "tsr-x", "matmul", NULL, NO_GPU);
  ASSERT_OK(tsr_report_render(in, TSR_REPORT_HTML, out, err, sizeof err));
  ASSERT_CONTAINS(slurp(out), "No GPU samples");
  write_doc(in, "tsr-x", "matmul", NULL, "\"gpu_util\": [null, 40, 95], \"gpu_memory_used\": [null, 1e9, 2e9]");
  ASSERT_OK(tsr_report_render(in, TSR_REPORT_HTML, out, err, sizeof err));
  const char *html = slurp(out);
  ASSERT_TRUE(strstr(html, "No GPU samples") == NULL);
  ASSERT_CONTAINS(html, ">GPU utilization</text>");
  ASSERT_CONTAINS(html, "<h3>GPU memory</h3>");
  ASSERT_EQ(count(html, "<polyline"), 3 + 2 + 1);   /* memory (3 tiers), utilization (CPU, GPU), GPU memory */
}

TEST(text_has_the_verdict_and_the_ops)
{
  char in[256], out[256], err[512] = "";
  snprintf(in, sizeof in, "%s/t.json", dir);
  snprintf(out, sizeof out, "%s/t.txt", dir);
  write_doc(in, "tsr-x", "matmul", NULL, NO_GPU);
  ASSERT_OK(tsr_report_render(in, TSR_REPORT_TEXT, out, err, sizeof err));
  const char *text = slurp(out);
  ASSERT_CONTAINS(text, "tsr-x: 2.50 s wall, 10/10 tasks done");
  ASSERT_CONTAINS(text, "bounded by: compute");
  ASSERT_CONTAINS(text, "  - compute: 80% & more");
  ASSERT_CONTAINS(text, "matmul");
}

TEST(a_missing_field_is_named_with_the_file)
{
  char in[256], out[256], err[512] = "";
  snprintf(in, sizeof in, "%s/m.json", dir);
  snprintf(out, sizeof out, "%s/m.html", dir);
  write_doc(in, "tsr-x", "matmul", "bound", NO_GPU);
  ASSERT_EQ(tsr_report_render(in, TSR_REPORT_HTML, out, err, sizeof err), TSR_EPROTO);
  ASSERT_CONTAINS(err, "m.json");
  ASSERT_CONTAINS(err, "field 'bound' is missing");
}

TEST(not_json_or_not_a_report_is_refused)
{
  char in[256], err[512] = "";
  snprintf(in, sizeof in, "%s/junk.json", dir);
  FILE *f = fopen(in, "w");
  fputs("{\"tessera_report\": ", f);
  fclose(f);
  ASSERT_EQ(tsr_report_render(in, TSR_REPORT_TEXT, NULL, err, sizeof err), TSR_EIO);
  ASSERT_CONTAINS(err, "cannot read report");
  ASSERT_CONTAINS(err, "junk.json");
  f = fopen(in, "w");
  fputs("[1, 2]", f);
  fclose(f);
  ASSERT_EQ(tsr_report_render(in, TSR_REPORT_TEXT, NULL, err, sizeof err), TSR_EPROTO);
  ASSERT_CONTAINS(err, "is not a Tessera report: field 'tessera_report'");
}

TEST(an_unwritable_output_names_its_path)
{
  char in[256], err[512] = "";
  snprintf(in, sizeof in, "%s/u.json", dir);
  write_doc(in, "tsr-x", "matmul", NULL, NO_GPU);
  ASSERT_EQ(tsr_report_render(in, TSR_REPORT_HTML, "/nonexistent-dir/x.html", err, sizeof err), TSR_EIO);
  ASSERT_CONTAINS(err, "cannot write '/nonexistent-dir/x.html'");
}

TEST(the_recorder_checks_its_arguments)
{
  tsr_report *rec = NULL;
  ASSERT_EQ(tsr_report_start(NULL, NULL, &rec), TSR_EINVAL);
  ASSERT_TRUE(rec == NULL);
  ASSERT_EQ(tsr_report_finish(NULL, 0), TSR_EINVAL);
  char err[128] = "";
  ASSERT_EQ(tsr_report_save(NULL, "x.json", err, sizeof err), TSR_EINVAL);
  ASSERT_CONTAINS(err, "not finished");
  tsr_report_progress(NULL, NULL);   /* no-ops */
  tsr_report_destroy(NULL);
  tsr_report_destroy(&rec);
}

int main(void)
{
  if (mkdtemp(dir) == NULL) return perror("mkdtemp"), 1;
  RUN(html_escapes_the_documents_strings);
  RUN(gpu_samples_are_plotted_when_present);
  RUN(text_has_the_verdict_and_the_ops);
  RUN(a_missing_field_is_named_with_the_file);
  RUN(not_json_or_not_a_report_is_refused);
  RUN(an_unwritable_output_names_its_path);
  RUN(the_recorder_checks_its_arguments);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return kit_summary();
}
