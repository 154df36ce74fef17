/* CURVE keys: reading key files and allow-lists, setting socket options.
 * The ZAP handler that uses the key sets is in zap.c. */
#include "curve.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

bool tsr_curve_key_valid(const char *s, size_t len)
{
  if (len != TSR_CURVE_KEY_LEN) return false;
  char text[TSR_CURVE_KEY_LEN + 1];
  uint8_t bin[32];
  memcpy(text, s, len);
  text[len] = '\0';
  return zmq_z85_decode(bin, text) != NULL;
}

/* The line without surrounding white space; NULL for a blank or comment
 * line. Z85 has no space, so "# " can only start a comment. */
static char *key_line(char *line)
{
  while (*line == ' ' || *line == '\t') line++;
  size_t len = strlen(line);
  while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
    line[--len] = '\0';
  if (len == 0 || strncmp(line, "# ", 2) == 0 || strcmp(line, "#") == 0) return NULL;
  return line;
}

int tsr_curve_read_key(const char *path, char out[TSR_CURVE_KEY_LEN + 1], tsr_errbuf *err)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) return tsr_fail(err, TSR_EIO, "cannot read key file %s: %s", path, strerror(errno));
  char line[256];
  int rc = tsr_fail(err, TSR_EINVAL, "key file %s holds no key", path);
  for (int no = 1; fgets(line, sizeof line, f) != NULL; no++) {
    char *key = key_line(line);
    if (key == NULL) continue;
    if (tsr_curve_key_valid(key, strlen(key))) {
      memcpy(out, key, TSR_CURVE_KEY_LEN + 1);
      rc = 0;
    } else {
      rc = tsr_fail(err, TSR_EINVAL, "%s line %d: not a CURVE key (40 characters of Z85, as `tessera keygen` writes)",
                    path, no);
    }
    break;
  }
  fclose(f);
  return rc;
}

int tsr_curve_load(tsr_curve *c, const char *secret_path, const char *server_key_path, tsr_errbuf *err)
{
  tsr_curve k = {.on = true};
  int rc = tsr_curve_read_key(secret_path, k.secret_key, err);
  if (rc == 0 && zmq_curve_public(k.public_key, k.secret_key) != 0)
    rc = tsr_fail(err, TSR_EINVAL, "%s: cannot derive the public key", secret_path);
  if (rc == 0 && server_key_path != NULL) rc = tsr_curve_read_key(server_key_path, k.server_key, err);
  if (rc != 0) return rc;
  struct stat sb;
  if (stat(secret_path, &sb) == 0 && (sb.st_mode & 077) != 0)
    TSR_WARN("secret key file %s is readable by others (mode %03o); chmod 600 it", secret_path,
             (unsigned)(sb.st_mode & 0777));
  *c = k;
  return 0;
}

int tsr_curve_server(void *sock, const tsr_curve *c, const char *zap_domain, tsr_errbuf *err)
{
  int one = 1;
  if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
      zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, c->secret_key, TSR_CURVE_KEY_LEN) != 0 ||
      zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, zap_domain, strlen(zap_domain)) != 0)
    return tsr_fail(err, TSR_ECONN, "cannot make a CURVE server socket: %s", zmq_strerror(zmq_errno()));
  return 0;
}

int tsr_curve_client(void *sock, const tsr_curve *c, const char *server_key, tsr_errbuf *err)
{
  if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_key, TSR_CURVE_KEY_LEN) != 0 ||
      zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, c->public_key, TSR_CURVE_KEY_LEN) != 0 ||
      zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, c->secret_key, TSR_CURVE_KEY_LEN) != 0)
    return tsr_fail(err, TSR_ECONN, "cannot make a CURVE client socket: %s", zmq_strerror(zmq_errno()));
  return 0;
}

void tsr_curve_split_address(const char *address, char *endpoint, size_t cap, char key[TSR_CURVE_KEY_LEN + 1])
{
  size_t len = strlen(address), tag = strlen(TSR_CURVE_ADDR_TAG);
  key[0] = '\0';
  if (len > tag + TSR_CURVE_KEY_LEN && memcmp(address + len - TSR_CURVE_KEY_LEN - tag, TSR_CURVE_ADDR_TAG, tag) == 0) {
    memcpy(key, address + len - TSR_CURVE_KEY_LEN, TSR_CURVE_KEY_LEN + 1);
    len -= TSR_CURVE_KEY_LEN + tag;
  }
  snprintf(endpoint, cap, "%.*s", (int)len, address);
}

/* ---------- key sets ---------- */

bool tsr_keyset_has(const tsr_keyset *set, const char *key)
{
  for (size_t i = 0; i < set->n; i++)
    if (strcmp(set->keys[i], key) == 0) return true;
  return false;
}

int tsr_keyset_add(tsr_keyset *set, const char *key)
{
  if (tsr_keyset_has(set, key)) return 0;
  if (set->n == set->cap) {
    size_t cap = set->cap ? 2 * set->cap : 16;
    void *grown = realloc(set->keys, cap * sizeof *set->keys);
    if (grown == NULL) return TSR_ENOMEM;
    set->keys = grown;
    set->cap = cap;
  }
  snprintf(set->keys[set->n++], TSR_CURVE_KEY_LEN + 1, "%s", key);
  return 0;
}

void tsr_keyset_remove(tsr_keyset *set, const char *key)
{
  for (size_t i = 0; i < set->n; i++)
    if (strcmp(set->keys[i], key) == 0) {
      memcpy(set->keys[i], set->keys[--set->n], TSR_CURVE_KEY_LEN + 1);
      return;
    }
}

void tsr_keyset_free(tsr_keyset *set)
{
  free(set->keys);
  *set = (tsr_keyset){0};
}

static int load_list_file(tsr_keyset *set, const char *path, tsr_errbuf *err)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) return tsr_fail(err, TSR_EIO, "cannot read allow-list %s: %s", path, strerror(errno));
  char line[256];
  int rc = 0;
  for (int no = 1; rc == 0 && fgets(line, sizeof line, f) != NULL; no++) {
    char *key = key_line(line);
    if (key == NULL) continue;
    if (!tsr_curve_key_valid(key, strlen(key)))
      rc = tsr_fail(err, TSR_EINVAL, "allow-list %s line %d: not a CURVE public key (40 characters of Z85)", path, no);
    else
      rc = tsr_keyset_add(set, key);
  }
  fclose(f);
  return rc;
}

static int load_list_dir(tsr_keyset *set, const char *path, DIR *dir, tsr_errbuf *err)
{
  int rc = 0;
  struct dirent *ent;
  while (rc == 0 && (ent = readdir(dir)) != NULL) {
    size_t len = strlen(ent->d_name);
    if (len < 5 || strcmp(ent->d_name + len - 4, ".pub") != 0) continue;
    char file[4096], key[TSR_CURVE_KEY_LEN + 1];
    snprintf(file, sizeof file, "%s/%s", path, ent->d_name);
    rc = tsr_curve_read_key(file, key, err);
    if (rc == 0) rc = tsr_keyset_add(set, key);
  }
  return rc;
}

int tsr_keyset_load(tsr_keyset *set, const char *path, tsr_errbuf *err)
{
  tsr_keyset fresh = {0};
  DIR *dir = opendir(path);
  int rc = dir != NULL ? load_list_dir(&fresh, path, dir, err) : load_list_file(&fresh, path, err);
  if (dir != NULL) closedir(dir);
  if (rc != 0) {
    tsr_keyset_free(&fresh);
    return rc;
  }
  tsr_keyset_free(set);
  *set = fresh;
  return 0;
}
