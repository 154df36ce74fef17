/* The write-ahead journal and the recovery that replays it (journal.h has
 * the contract and the file format; docs/journal.md the user's story).
 *
 * Invariants: records are appended in event order on the loop's thread;
 * the file always ends with whole records except after a crash during a
 * write, which replay cuts off; replay calls the same admission code
 * (sched_submit_maps) as a live submit, so a replayed graph is the graph
 * that was accepted. */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JOURNAL_MAGIC "TSRJOURNAL1\n"
#define JOURNAL_MAGIC_LEN 12
#define JOURNAL_MIN_COMPACT (64ull << 20)
#define JOURNAL_MAX_RECORD (2ull << 30)

typedef struct sched_journal sched_journal;
struct sched_journal {
  int fd;
  char path[4096];
  bool fsync;
  bool dirty;                 /* written since the last sync */
  bool failed;                /* a write failed: logged once, journal off */
  uint64_t bytes;             /* file size */
  uint64_t compact_at;        /* compact when bytes passes this */
  uint64_t compact_bytes;
  uint64_t grace_ms;
  uint64_t started_ms;
  char **expected;            /* worker addresses the journal knew at start */
  uint32_t nexpected;
  tsr_wbuf rec;               /* the record being built */
};

/* ---------- writing ---------- */

static uint32_t checksum(const void *data, size_t len) { return (uint32_t)tsr_hash_bytes(data, len); }

static int write_all(int fd, const void *data, size_t len)
{
  const char *p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return TSR_EIO;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int write_record(int fd, const void *payload, size_t len)
{
  unsigned char head[8];
  uint32_t sum = checksum(payload, len);
  for (int i = 0; i < 4; i++) head[i] = (unsigned char)(len >> (8 * i)), head[4 + i] = (unsigned char)(sum >> (8 * i));
  int rc = write_all(fd, head, sizeof head);
  return rc == 0 ? write_all(fd, payload, len) : rc;
}

/* Appends the record built in j->rec. A failed write turns the journal off
 * (logged once): the scheduler keeps serving, without restart safety. */
static void append(sched_journal *j)
{
  if (!j->failed && write_record(j->fd, j->rec.sbuf.data, j->rec.sbuf.size) != 0) {
    TSR_ERROR("journal %s: write failed (%s); the journal is off from now on", j->path, strerror(errno));
    j->failed = true;
  }
  j->bytes += 8 + j->rec.sbuf.size;
  j->dirty = true;
  tsr_wbuf_reset(&j->rec);
}

static sched_journal *journal_of(sched_state *st) { return st->journal && !st->journal->failed ? st->journal : NULL; }

void sched_journal_client(sched_state *st, uint32_t c)
{
  sched_journal *j = journal_of(st);
  if (j == NULL) return;
  tsr_wbuf_begin(&j->rec, "client", 3);
  tsr_pack_kv_uint(&j->rec.pk, "token", st->clients[c].token);
  tsr_pack_kv_str(&j->rec.pk, "name", st->clients[c].name);
  append(j);
}

void sched_journal_client_gone(sched_state *st, uint32_t c)
{
  sched_journal *j = journal_of(st);
  if (j == NULL) return;
  tsr_wbuf_begin(&j->rec, "gone", 2);
  tsr_pack_kv_uint(&j->rec.pk, "token", st->clients[c].token);
  append(j);
}

static void pack_bin(msgpack_packer *pk, const void *data, size_t len)
{
  msgpack_pack_bin(pk, len);
  msgpack_pack_bin_body(pk, data, len);
}

void sched_journal_submit(sched_state *st, uint32_t c, uint64_t graph, const sched_pending *pd, const void *last,
                          size_t last_len)
{
  sched_journal *j = journal_of(st);
  if (j == NULL) return;
  uint32_t nparts = pd ? pd->nparts : 0;
  tsr_wbuf_begin(&j->rec, "submit", 4);
  tsr_pack_kv_uint(&j->rec.pk, "token", st->clients[c].token);
  tsr_pack_kv_uint(&j->rec.pk, "graph", graph);
  tsr_pack_str(&j->rec.pk, "parts");
  msgpack_pack_array(&j->rec.pk, nparts + 1);
  for (uint32_t k = 0; k < nparts; k++) pack_bin(&j->rec.pk, pd->parts[k].bytes, pd->parts[k].len);
  pack_bin(&j->rec.pk, last, last_len);
  append(j);
}

void sched_journal_release(sched_state *st, uint32_t c, const msgpack_object *keys, size_t n)
{
  sched_journal *j = journal_of(st);
  if (j == NULL) return;
  tsr_wbuf_begin(&j->rec, "release", 3);
  tsr_pack_kv_uint(&j->rec.pk, "token", st->clients[c].token);
  tsr_pack_str(&j->rec.pk, "keys");
  msgpack_pack_array(&j->rec.pk, n);
  for (size_t i = 0; i < n; i++) msgpack_pack_object(&j->rec.pk, keys[i]);
  append(j);
}

void sched_journal_done(sched_state *st, uint32_t id)
{
  sched_journal *j = journal_of(st);
  const sched_task *t = &st->tasks[id];
  if (j == NULL || t->state != TS_MEMORY || t->who_has == SCHED_NO_WORKER) return;
  tsr_wbuf_begin(&j->rec, "done", 4);
  tsr_pack_kv_strn(&j->rec.pk, "key", t->key, t->key_len);
  tsr_pack_kv_str(&j->rec.pk, "where", st->workers[t->who_has].address);
  tsr_pack_kv_uint(&j->rec.pk, "nbytes", t->nbytes);
  append(j);
}

void sched_journal_worker(sched_state *st, uint32_t w, bool joined)
{
  sched_journal *j = journal_of(st);
  if (j == NULL) return;
  tsr_wbuf_begin(&j->rec, joined ? "worker" : "worker_gone", 2);
  tsr_pack_kv_str(&j->rec.pk, "address", st->workers[w].address);
  append(j);
}

/* ---------- reading ---------- */

typedef struct jfile {
  char *data;
  size_t len;
} jfile;

static int read_file(const char *path, jfile *f, tsr_errbuf *err)
{
  f->data = NULL, f->len = 0;
  FILE *fp = fopen(path, "rb");
  if (fp == NULL) return errno == ENOENT ? 0 : tsr_fail(err, TSR_EIO, "journal %s: %s", path, strerror(errno));
  struct stat sb;
  int rc = fstat(fileno(fp), &sb) == 0 ? 0 : tsr_fail(err, TSR_EIO, "journal %s: %s", path, strerror(errno));
  if (rc == 0 && (f->data = malloc((size_t)sb.st_size + 1)) == NULL)
    rc = tsr_fail(err, TSR_ENOMEM, "journal %s: out of memory reading %lld bytes", path, (long long)sb.st_size);
  if (rc == 0 && fread(f->data, 1, (size_t)sb.st_size, fp) != (size_t)sb.st_size)
    rc = tsr_fail(err, TSR_EIO, "journal %s: short read", path);
  f->len = rc == 0 ? (size_t)sb.st_size : 0;
  fclose(fp);
  return rc;
}

static uint32_t le32(const char *p)
{
  const unsigned char *u = (const unsigned char *)p;
  return (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
}

/* The record at *off: 1 with payload/len set and *off advanced, 0 at a
 * clean end, -1 at a torn or corrupt record (*off left there). */
static int next_record(const jfile *f, size_t *off, const char **payload_p, size_t *len_p)
{
  if (*off == f->len) return 0;
  if (f->len - *off < 8) return -1;
  size_t len = le32(f->data + *off);
  if (len > f->len - *off - 8 || checksum(f->data + *off + 8, len) != le32(f->data + *off + 4)) return -1;
  *payload_p = f->data + *off + 8;
  *len_p = len;
  *off += 8 + len;
  return 1;
}

/* ---------- replay ---------- */

static uint32_t find_client(sched_state *st, uint64_t token)
{
  for (uint32_t c = 0; c < st->nclients_slots; c++)
    if (st->clients[c].alive && st->clients[c].token == token) return c;
  return SCHED_NONE;
}

/* A client leaves for good: its wants are released (as peers.c does for a
 * connected client). */
static void forget_client(sched_state *st, uint32_t c)
{
  sched_client *cl = &st->clients[c];
  for (uint32_t i = 0; i < cl->wants.cap; i++) {
    uint32_t id = cl->wants.slots[i];
    if (id >= SCHED_NONE - 1) continue;
    st->tasks[id].nwanted--;
    sched_recheck(st, id);
  }
  sched_idset_free(&cl->wants);
  memset(&cl->wants, 0, sizeof cl->wants);
  for (uint32_t g = 0; g < st->ngraphs; g++)
    if (st->graphs[g] != NULL && st->graphs[g]->client == c) st->graphs[g]->client = SCHED_NONE;
  cl->alive = false;
  st->nclients_alive--;
  sched_settle(st);
}

static int replay_client(sched_state *st, const msgpack_object *map, tsr_errbuf *err)
{
  uint64_t token;
  char name[TSR_MAX_NAME_LEN + 1];
  int rc = tsr_wire_uint(map, "token", &token, err);
  if (rc == 0) rc = tsr_wire_strcpy(map, "name", name, sizeof name, err);
  if (rc != 0 || find_client(st, token) != SCHED_NONE) return rc;
  uint32_t c = sched_client_alloc(st, SCHED_NONE);
  if (c == SCHED_NONE) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  st->clients[c].token = token;
  memcpy(st->clients[c].name, name, sizeof name);
  return 0;
}

static int replay_submit(sched_state *st, uint32_t c, const msgpack_object *map, tsr_errbuf *err)
{
  uint64_t graph;
  const msgpack_object *parts;
  size_t n;
  int rc = tsr_wire_uint(map, "graph", &graph, err);
  if (rc == 0) rc = tsr_wire_array(map, "parts", UINT32_MAX, &parts, &n, err);
  if (rc != 0) return rc;
  tsr_reader *rd = calloc(n ? n : 1, sizeof *rd);
  const msgpack_object **maps = calloc(n ? n : 1, sizeof *maps);
  rc = rd && maps ? 0 : tsr_fail(err, TSR_ENOMEM, "out of memory");
  size_t opened = 0;
  for (; rc == 0 && opened < n; opened++) {
    char op[TSR_MAX_NAME_LEN + 1];
    if (parts[opened].type != MSGPACK_OBJECT_BIN) rc = tsr_fail(err, TSR_EPROTO, "a part is not bytes");
    else if ((rc = tsr_reader_init(&rd[opened], parts[opened].via.bin.ptr, parts[opened].via.bin.size, err)) == 0 &&
             tsr_reader_next(&rd[opened], &maps[opened], op, err) != 1)
      rc = tsr_fail(err, TSR_EPROTO, "part %zu of graph %llu is not a message", opened, (unsigned long long)graph);
  }
  tsr_errbuf gerr = {{0}};
  int added = rc == 0 ? sched_submit_maps(st, c, graph, maps, (uint32_t)n, &gerr) : 0;
  /* A graph the live scheduler accepted is accepted again; if not (an
   * input forgotten by a record lost to compaction), say so and go on. */
  if (added < 0)
    TSR_WARN("journal: graph %llu of client '%s' could not be admitted again: %s", (unsigned long long)graph,
             st->clients[c].name, gerr.text);
  for (size_t k = 0; rd && k < opened; k++) tsr_reader_done(&rd[k]);
  free(rd);
  free(maps);
  sched_settle(st);
  return rc;
}

static int replay_release(sched_state *st, uint32_t c, const msgpack_object *map, tsr_errbuf *err)
{
  const msgpack_object *keys;
  size_t n;
  int rc = tsr_wire_array(map, "keys", UINT32_MAX, &keys, &n, err);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const char *key;
    size_t len;
    if (tsr_obj_str(&keys[i], TSR_MAX_KEY_LEN, &key, &len, NULL) != 0) continue;
    uint32_t id = sched_task_find(st, key, len);
    if (id != SCHED_NONE) sched_tr_unwant(st, c, id);
  }
  sched_settle(st);
  return rc;
}

static void expect_worker(sched_journal *j, const char *address, bool joined)
{
  for (uint32_t i = 0; i < j->nexpected; i++)
    if (strcmp(j->expected[i], address) == 0) {
      if (!joined) {
        free(j->expected[i]);
        j->expected[i] = j->expected[--j->nexpected];
      }
      return;
    }
  char **grown = joined ? realloc(j->expected, (j->nexpected + 1) * sizeof *grown) : NULL;
  if (grown == NULL) return;
  j->expected = grown;
  if ((j->expected[j->nexpected] = strdup(address)) != NULL) j->nexpected++;
}

static int replay_one(sched_state *st, sched_journal *j, const char *op, const msgpack_object *map, tsr_errbuf *err)
{
  if (strcmp(op, "client") == 0) return replay_client(st, map, err);
  if (strcmp(op, "worker") == 0 || strcmp(op, "worker_gone") == 0) {
    char address[TSR_MAX_NAME_LEN + 1];
    int rc = tsr_wire_strcpy(map, "address", address, sizeof address, err);
    if (rc == 0) expect_worker(j, address, op[6] == '\0');
    return rc;
  }
  if (strcmp(op, "done") == 0) return 0;   /* workers' hellos are the truth */
  uint64_t token;
  int rc = tsr_wire_uint(map, "token", &token, err);
  uint32_t c = rc == 0 ? find_client(st, token) : SCHED_NONE;
  if (rc != 0 || c == SCHED_NONE) return rc;  /* a client already gone */
  if (strcmp(op, "gone") == 0) return forget_client(st, c), 0;
  if (strcmp(op, "submit") == 0) return replay_submit(st, c, map, err);
  if (strcmp(op, "release") == 0) return replay_release(st, c, map, err);
  return tsr_fail(err, TSR_EPROTO, "unknown record '%s'", op);
}

/* Replays f from after the magic; *end_p is where the whole records end. */
static int replay(sched_state *st, sched_journal *j, const jfile *f, size_t *end_p, tsr_errbuf *err)
{
  size_t off = JOURNAL_MAGIC_LEN, count = 0;
  const char *payload;
  size_t len;
  int more, rc = 0;
  while (rc == 0 && (more = next_record(f, &off, &payload, &len)) == 1) {
    tsr_reader rd;
    const msgpack_object *map;
    char op[TSR_MAX_NAME_LEN + 1];
    rc = tsr_reader_init(&rd, payload, len, err);
    if (rc == 0 && tsr_reader_next(&rd, &map, op, err) != 1) rc = tsr_fail(err, TSR_EPROTO, "not a record");
    if (rc == 0) rc = replay_one(st, j, op, map, err);
    tsr_reader_done(&rd);
    if (rc != 0) return tsr_fail(err, rc, "journal %s: record %zu at byte %zu: %s", j->path, count, off - len - 8, err->text);
    count++;
  }
  if (rc == 0 && more < 0)
    TSR_WARN("journal %s: cut off a torn record at byte %zu of %zu (a crash during a write)", j->path, off, f->len);
  *end_p = off;
  TSR_INFO("journal %s: replayed %zu records: %u clients waiting to reconnect, %u tasks, %u workers expected", j->path,
           count, st->nclients_alive, st->nlive, j->nexpected);
  return rc;
}

/* ---------- compaction ---------- */

static bool graph_alive(const sched_state *st, uint64_t token, uint64_t graph)
{
  for (uint32_t g = 0; g < st->ngraphs; g++) {
    const sched_graph *gr = st->graphs[g];
    if (gr != NULL && gr->graph_id == graph && gr->client != SCHED_NONE && st->clients[gr->client].token == token)
      return true;
  }
  return false;
}

/* Whether a record still says something about the present state. */
static bool record_live(const sched_state *st, const char *op, const msgpack_object *map)
{
  uint64_t token = 0, graph = 0;
  if (strcmp(op, "worker") == 0) return true;   /* cheap; keeps the recovery wait exact */
  if (strcmp(op, "worker_gone") == 0) return true;
  if (strcmp(op, "done") == 0) {
    const char *key;
    size_t len;
    if (tsr_wire_str(map, "key", TSR_MAX_KEY_LEN, &key, &len, NULL) != 0) return false;
    uint32_t id = sched_task_find(st, key, len);
    return id != SCHED_NONE && st->tasks[id].state == TS_MEMORY;
  }
  if (tsr_wire_uint(map, "token", &token, NULL) != 0 || find_client((sched_state *)st, token) == SCHED_NONE) return false;
  if (strcmp(op, "submit") == 0) return tsr_wire_uint(map, "graph", &graph, NULL) == 0 && graph_alive(st, token, graph);
  return strcmp(op, "client") == 0 || strcmp(op, "release") == 0;
}

/* Copies the live records of the current file to PATH.new, syncs it and
 * renames it over PATH; the journal then appends to the new file. */
static int compact(sched_state *st, sched_journal *j, tsr_errbuf *err)
{
  jfile f;
  int rc = read_file(j->path, &f, err);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.new", j->path);
  int fd = rc == 0 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
  if (rc == 0 && fd < 0) rc = tsr_fail(err, TSR_EIO, "journal %s: %s", tmp, strerror(errno));
  if (rc == 0) rc = write_all(fd, JOURNAL_MAGIC, JOURNAL_MAGIC_LEN);
  size_t off = JOURNAL_MAGIC_LEN, len, kept = JOURNAL_MAGIC_LEN;
  const char *payload;
  while (rc == 0 && f.len >= off && next_record(&f, &off, &payload, &len) == 1) {
    tsr_reader rd;
    const msgpack_object *map;
    char op[TSR_MAX_NAME_LEN + 1];
    bool live = tsr_reader_init(&rd, payload, len, NULL) == 0 && tsr_reader_next(&rd, &map, op, NULL) == 1 &&
                record_live(st, op, map);
    tsr_reader_done(&rd);
    if (live && (rc = write_record(fd, payload, len)) == 0) kept += 8 + len;
  }
  if (rc == 0 && (fdatasync(fd) != 0 || rename(tmp, j->path) != 0))
    rc = tsr_fail(err, TSR_EIO, "journal %s: %s", tmp, strerror(errno));
  if (fd >= 0 && rc != 0) close(fd), unlink(tmp);
  free(f.data);
  if (rc != 0) return rc;
  TSR_INFO("journal %s: compacted %llu bytes to %zu", j->path, (unsigned long long)j->bytes, kept);
  close(j->fd);
  j->fd = fd;
  j->bytes = kept;
  j->compact_at = 2 * kept > j->compact_bytes ? 2 * kept : j->compact_bytes;
  return 0;
}

void sched_journal_sync(sched_state *st)
{
  sched_journal *j = journal_of(st);
  if (j == NULL || !j->dirty) return;
  j->dirty = false;
  if (j->fsync && fdatasync(j->fd) != 0) {
    TSR_ERROR("journal %s: fdatasync failed (%s); the journal is off from now on", j->path, strerror(errno));
    j->failed = true;
    return;
  }
  tsr_errbuf err = {{0}};
  if (j->bytes > j->compact_at && compact(st, j, &err) != 0) {
    TSR_WARN("%s; compaction retried when the journal has grown again", err.text);
    j->compact_at = 2 * j->bytes;
  }
}

/* ---------- open / close ---------- */

static int open_file(sched_journal *j, const char *dir, tsr_errbuf *err)
{
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return tsr_fail(err, TSR_EIO, "journal directory %s: %s", dir, strerror(errno));
  snprintf(j->path, sizeof j->path, "%s/journal.tsj", dir);
  j->fd = open(j->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (j->fd < 0) return tsr_fail(err, TSR_EIO, "journal %s: %s", j->path, strerror(errno));
  return 0;
}

/* Replays an existing file, or writes the magic into a new one; leaves the
 * file positioned at the end of its whole records. */
static int load(sched_state *st, sched_journal *j, tsr_errbuf *err)
{
  jfile f;
  int rc = read_file(j->path, &f, err);
  size_t end = JOURNAL_MAGIC_LEN;
  if (rc == 0 && f.len == 0) rc = write_all(j->fd, JOURNAL_MAGIC, JOURNAL_MAGIC_LEN);
  else if (rc == 0 && (f.len < JOURNAL_MAGIC_LEN || memcmp(f.data, JOURNAL_MAGIC, JOURNAL_MAGIC_LEN) != 0))
    rc = tsr_fail(err, TSR_EPROTO, "journal %s: not a Tessera journal (bad magic line)", j->path);
  else if (rc == 0)
    rc = replay(st, j, &f, &end, err);
  free(f.data);
  if (rc == 0 && (ftruncate(j->fd, (off_t)end) != 0 || lseek(j->fd, (off_t)end, SEEK_SET) < 0))
    rc = tsr_fail(err, TSR_EIO, "journal %s: %s", j->path, strerror(errno));
  j->bytes = end;
  return rc;
}

int sched_journal_open(sched_state *st, const sched_journal_opts *opts, uint64_t now_ms, tsr_errbuf *err)
{
  sched_journal *j = calloc(1, sizeof *j);
  if (j == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  j->fd = -1;
  j->fsync = opts->fsync;
  j->grace_ms = opts->grace_ms;
  j->started_ms = now_ms;
  j->compact_bytes = opts->compact_bytes ? opts->compact_bytes : JOURNAL_MIN_COMPACT;
  tsr_wbuf_init(&j->rec);
  int rc = open_file(j, opts->dir, err);
  if (rc == 0) rc = load(st, j, err);
  st->journal = j;
  if (rc == 0 && j->bytes > j->compact_bytes) rc = compact(st, j, err);
  j->compact_at = 2 * j->bytes > j->compact_bytes ? 2 * j->bytes : j->compact_bytes;
  if (rc == 0 && fsync(j->fd) != 0) rc = tsr_fail(err, TSR_EIO, "journal %s: %s", j->path, strerror(errno));
  if (rc != 0) sched_journal_close(st);
  return rc;
}

void sched_journal_close(sched_state *st)
{
  sched_journal *j = st->journal;
  if (j == NULL) return;
  if (j->fd >= 0) {
    if (j->dirty) fdatasync(j->fd);
    close(j->fd);
  }
  for (uint32_t i = 0; i < j->nexpected; i++) free(j->expected[i]);
  free(j->expected);
  tsr_wbuf_free(&j->rec);
  free(j);
  st->journal = NULL;
}

/* ---------- recovery ---------- */

uint32_t sched_client_attach(sched_state *st, uint64_t token, uint32_t p)
{
  uint32_t c = token != 0 ? find_client(st, token) : SCHED_NONE;
  if (c == SCHED_NONE) return SCHED_NONE;
  uint32_t old = st->clients[c].peer;
  if (old != SCHED_NONE && old != p && st->peers[old].in_use) {
    /* it gave up on its old connection before we noticed: move over */
    st->peers[old].role = PEER_NONE;
    sched_peer_remove(st, old, true);
  }
  st->clients[c].peer = p;
  return c;
}

bool sched_journal_holding(sched_state *st, uint64_t now_ms)
{
  sched_journal *j = st->journal;
  if (j == NULL || j->nexpected == 0) return false;
  if (now_ms - j->started_ms > st->cfg.timeout_ms) {
    TSR_INFO("journal: %u workers the journal knew did not come back within %llu ms; placing tasks", j->nexpected,
             (unsigned long long)st->cfg.timeout_ms);
  } else {
    uint32_t back = 0;
    for (uint32_t i = 0; i < j->nexpected; i++)
      for (uint32_t w = 0; w < st->nworkers_slots && back <= i; w++)
        back += st->workers[w].alive && strcmp(st->workers[w].address, j->expected[i]) == 0;
    if (back < j->nexpected) return true;
    TSR_INFO("journal: every worker the journal knew is back; placing tasks");
  }
  for (uint32_t i = 0; i < j->nexpected; i++) free(j->expected[i]);
  j->nexpected = 0;
  return false;
}

void sched_journal_expire(sched_state *st, uint64_t now_ms)
{
  sched_journal *j = st->journal;
  if (j == NULL || j->grace_ms == 0 || now_ms - j->started_ms <= j->grace_ms) return;
  for (uint32_t c = 0; c < st->nclients_slots; c++) {
    if (!st->clients[c].alive || st->clients[c].peer != SCHED_NONE) continue;
    TSR_INFO("client '%s' did not come back within %llu ms of the restart; releasing its keys", st->clients[c].name,
             (unsigned long long)j->grace_ms);
    sched_journal_client_gone(st, c);
    forget_client(st, c);
  }
}

/* One `chunks` entry [key, nbytes, dtype, shape]; 0 or -1 when malformed. */
static int chunk_entry(const msgpack_object *o, const char **key_p, size_t *len_p, uint64_t *nbytes_p, tsr_meta *meta)
{
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4) return -1;
  const msgpack_object *e = o->via.array.ptr;
  uint64_t dtype;
  if (tsr_obj_str(&e[0], TSR_MAX_KEY_LEN, key_p, len_p, NULL) != 0 || tsr_obj_uint(&e[1], nbytes_p, NULL) != 0 ||
      tsr_obj_uint(&e[2], &dtype, NULL) != 0 || dtype > 255 || e[3].type != MSGPACK_OBJECT_ARRAY ||
      e[3].via.array.size > TSR_MAX_NDIM)
    return -1;
  memset(meta, 0, sizeof *meta);
  meta->dtype = (tsr_dtype)dtype;
  meta->ndim = (int)e[3].via.array.size;
  for (int d = 0; d < meta->ndim; d++)
    if (tsr_obj_int(&e[3].via.array.ptr[d], &meta->shape[d], NULL) != 0 || meta->shape[d] < 0) return -1;
  return 0;
}

uint32_t sched_recover_chunks(sched_state *st, uint16_t w, const msgpack_object *items, size_t n)
{
  uint32_t adopted = 0, freed = 0;
  for (size_t i = 0; i < n; i++) {
    const char *key;
    size_t len;
    uint64_t nbytes;
    tsr_meta meta;
    if (chunk_entry(&items[i], &key, &len, &nbytes, &meta) != 0) continue;
    uint32_t id = sched_task_find(st, key, len);
    int s = id != SCHED_NONE ? st->tasks[id].state : TS_FREE;
    if (s == TS_WAITING || s == TS_READY || s == TS_QUEUED) {
      sched_tr_adopt(st, id, w, nbytes, &meta);
      sched_journal_done(st, id);
      adopted++;
    } else if (!(s == TS_MEMORY && st->tasks[id].who_has == w)) {
      sched_queue_free(st, w, key, len);  /* not needed, or held elsewhere */
      freed++;
    }
  }
  sched_settle(st);
  if (n > 0)
    TSR_INFO("worker '%s' reported %zu chunks: %u adopted, %u freed", st->workers[w].name, n, adopted, freed);
  return adopted;
}
