/* tsr_args: a params map built without msgpack in the caller's code.
 * Entries are packed as they are added (name, value) into `body`; the map
 * header is prepended lazily by tsr_args_data(), whose result is cached
 * until the next change. Names must be unique within one args. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct tsr_args {
  msgpack_sbuffer body;
  msgpack_packer pk;
  char **names;
  size_t n, cap;
  char *enc;          /* cached encoding, NULL when stale */
  size_t enc_len;
};

TSR_API int tsr_args_new(tsr_args **args_p)
{
  if (args_p == NULL) return client_fail(TSR_EINVAL, "tsr_args_new: args_p is NULL");
  tsr_args *a = calloc(1, sizeof *a);
  if (a == NULL) return client_fail(TSR_ENOMEM, "tsr_args_new: out of memory");
  msgpack_sbuffer_init(&a->body);
  msgpack_packer_init(&a->pk, &a->body, msgpack_sbuffer_write);
  *args_p = a;
  return 0;
}

TSR_API void tsr_args_destroy(tsr_args **args_p)
{
  if (args_p == NULL || *args_p == NULL) return;
  tsr_args *a = *args_p;
  msgpack_sbuffer_destroy(&a->body);
  for (size_t i = 0; i < a->n; i++) free(a->names[i]);
  free(a->names);
  free(a->enc);
  free(a);
  *args_p = NULL;
}

/* Checks the name and records it; on success the caller packs the value. */
static int add_name(tsr_args *a, const char *name)
{
  if (a == NULL || name == NULL || name[0] == '\0')
    return client_fail(TSR_EINVAL, "tsr_args: a parameter needs a non-empty name");
  size_t len = strlen(name);
  if (len > TSR_MAX_NAME_LEN)
    return client_fail(TSR_EINVAL, "tsr_args: parameter name of %zu bytes exceeds %d", len, TSR_MAX_NAME_LEN);
  for (size_t i = 0; i < a->n; i++)
    if (strcmp(a->names[i], name) == 0)
      return client_fail(TSR_EEXIST, "tsr_args: parameter '%s' set twice", name);
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 8;
    char **names = realloc(a->names, cap * sizeof *names);
    if (names == NULL) return client_fail(TSR_ENOMEM, "tsr_args: out of memory");
    a->names = names;
    a->cap = cap;
  }
  a->names[a->n] = strdup(name);
  if (a->names[a->n] == NULL) return client_fail(TSR_ENOMEM, "tsr_args: out of memory");
  a->n++;
  free(a->enc);
  a->enc = NULL;
  tsr_pack_str(&a->pk, name);
  return 0;
}

TSR_API int tsr_args_int(tsr_args *args, const char *name, int64_t value)
{
  int rc = add_name(args, name);
  if (rc == 0) msgpack_pack_int64(&args->pk, value);
  return rc;
}

TSR_API int tsr_args_float(tsr_args *args, const char *name, double value)
{
  int rc = add_name(args, name);
  if (rc == 0) msgpack_pack_double(&args->pk, value);
  return rc;
}

TSR_API int tsr_args_bool(tsr_args *args, const char *name, bool value)
{
  int rc = add_name(args, name);
  if (rc == 0 && value) msgpack_pack_true(&args->pk);
  if (rc == 0 && !value) msgpack_pack_false(&args->pk);
  return rc;
}

TSR_API int tsr_args_str(tsr_args *args, const char *name, const char *value)
{
  if (value == NULL) return client_fail(TSR_EINVAL, "tsr_args_str: value of '%s' is NULL", name ? name : "");
  int rc = add_name(args, name);
  if (rc == 0) tsr_pack_str(&args->pk, value);
  return rc;
}

TSR_API int tsr_args_ints(tsr_args *args, const char *name, const int64_t *values, size_t n)
{
  if (values == NULL && n > 0) return client_fail(TSR_EINVAL, "tsr_args_ints: values of '%s' is NULL", name ? name : "");
  if (n > UINT32_MAX) return client_fail(TSR_ELIMIT, "tsr_args_ints: %zu values are too many", n);
  int rc = add_name(args, name);
  if (rc != 0) return rc;
  msgpack_pack_array(&args->pk, n);
  for (size_t i = 0; i < n; i++) msgpack_pack_int64(&args->pk, values[i]);
  return 0;
}

TSR_API int tsr_args_floats(tsr_args *args, const char *name, const double *values, size_t n)
{
  if (values == NULL && n > 0)
    return client_fail(TSR_EINVAL, "tsr_args_floats: values of '%s' is NULL", name ? name : "");
  if (n > UINT32_MAX) return client_fail(TSR_ELIMIT, "tsr_args_floats: %zu values are too many", n);
  int rc = add_name(args, name);
  if (rc != 0) return rc;
  msgpack_pack_array(&args->pk, n);
  for (size_t i = 0; i < n; i++) msgpack_pack_double(&args->pk, values[i]);
  return 0;
}

TSR_API const void *tsr_args_data(const tsr_args *args, size_t *len_p)
{
  if (args == NULL) {
    if (len_p != NULL) *len_p = 0;
    return NULL;
  }
  /* The cache is logically const: it only memoizes the encoding. */
  tsr_args *a = (tsr_args *)args;
  if (a->enc == NULL) {
    msgpack_sbuffer out;
    msgpack_packer pk;
    msgpack_sbuffer_init(&out);
    msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, (uint32_t)a->n);
    if (a->body.size > 0) msgpack_sbuffer_write(&out, a->body.data, a->body.size);
    a->enc_len = out.size;
    a->enc = msgpack_sbuffer_release(&out);
  }
  if (len_p != NULL) *len_p = a->enc ? a->enc_len : 0;
  return a->enc;
}
