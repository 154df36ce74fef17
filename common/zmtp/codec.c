/* The pieces of ZMTP 3.0 on the wire (rfc.zeromq.org/spec/23): the
 * greeting, frame headers, a command's name, the metadata of READY and
 * INITIATE; and Z85 for keys (spec 32). Pure functions over bytes, so the
 * fuzz target reaches them through a connection's input. */
#include <string.h>

#include "zmtp_int.h"

static const char z85_chars[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

void tsr_zmtp_z85_encode(const uint8_t key[32], char text[TSR_ZMTP_KEY_LEN + 1])
{
  for (int i = 0; i < 8; i++) {
    uint32_t v = (uint32_t)key[4 * i] << 24 | (uint32_t)key[4 * i + 1] << 16 | (uint32_t)key[4 * i + 2] << 8 |
                 key[4 * i + 3];
    for (int j = 4; j >= 0; j--) {
      text[5 * i + j] = z85_chars[v % 85];
      v /= 85;
    }
  }
  text[TSR_ZMTP_KEY_LEN] = '\0';
}

int tsr_zmtp_z85_decode(const char *text, uint8_t key[32])
{
  if (text == NULL || strlen(text) != TSR_ZMTP_KEY_LEN) return -1;
  for (int i = 0; i < 8; i++) {
    uint64_t v = 0;
    for (int j = 0; j < 5; j++) {
      const char *at = text[5 * i + j] != '\0' ? strchr(z85_chars, text[5 * i + j]) : NULL;
      if (at == NULL) return -1;
      v = v * 85 + (uint64_t)(at - z85_chars);
    }
    if (v > 0xffffffffu) return -1;
    for (int j = 3; j >= 0; j--) {
      key[4 * i + j] = (uint8_t)v;
      v >>= 8;
    }
  }
  return 0;
}

/* signature (0xFF, 8 bytes of padding, 0x7F), version 3.0, mechanism
 * (20 bytes, NUL-padded), as-server, 31 bytes of filler */
void zmtp_greeting(uint8_t out[ZMTP_GREETING_LEN], zmtp_mech mech, bool as_server)
{
  memset(out, 0, ZMTP_GREETING_LEN);
  out[0] = 0xff;
  out[9] = 0x7f;
  out[10] = 3;
  out[11] = 0;
  memcpy(out + 12, mech == MECH_CURVE ? "CURVE" : "NULL", mech == MECH_CURVE ? 5 : 4);
  out[32] = as_server ? 1 : 0;
}

int zmtp_greeting_parse(const uint8_t in[ZMTP_GREETING_LEN], zmtp_mech *mech_p, const char **why_p)
{
  if (in[0] != 0xff || (in[9] & 1) == 0) return *why_p = "not a ZMTP peer (bad greeting signature)", -1;
  if (in[10] < 3) return *why_p = "the peer speaks ZMTP 1 or 2, not 3", -1;
  static const uint8_t null_mech[20] = "NULL", curve_mech[20] = "CURVE";
  if (memcmp(in + 12, null_mech, 20) == 0) *mech_p = MECH_NULL;
  else if (memcmp(in + 12, curve_mech, 20) == 0) *mech_p = MECH_CURVE;
  else return *why_p = "the peer asks for a mechanism other than NULL or CURVE", -1;
  return 0;
}

size_t zmtp_header(uint8_t out[ZMTP_MAX_HEADER], uint8_t flags, size_t len)
{
  if (len <= 255) {
    out[0] = flags;
    out[1] = (uint8_t)len;
    return 2;
  }
  out[0] = flags | ZMTP_FLAG_LONG;
  for (int i = 0; i < 8; i++) out[1 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
  return 9;
}

int zmtp_header_parse(const uint8_t *in, size_t n, uint8_t *flags_p, uint64_t *len_p, size_t *header_len_p)
{
  if (n < 2) return 0;
  uint8_t flags = in[0];
  if ((flags & ZMTP_FLAG_LONG) == 0) {
    *flags_p = flags, *len_p = in[1], *header_len_p = 2;
    return 1;
  }
  if (n < 9) return 0;
  uint64_t len = 0;
  for (int i = 0; i < 8; i++) len = len << 8 | in[1 + i];
  *flags_p = flags, *len_p = len, *header_len_p = 9;
  return 1;
}

bool zmtp_is_command(const uint8_t *body, size_t len, const char *name)
{
  size_t name_len = strlen(name);
  return len >= 1 + name_len && body[0] == name_len && memcmp(body + 1, name, name_len) == 0;
}

static size_t put_property(uint8_t *out, size_t cap, size_t at, const char *name, const void *value, size_t value_len)
{
  size_t name_len = strlen(name);
  if (at + 1 + name_len + 4 + value_len > cap) return at;
  out[at++] = (uint8_t)name_len;
  memcpy(out + at, name, name_len);
  at += name_len;
  for (int i = 3; i >= 0; i--) out[at++] = (uint8_t)(value_len >> (8 * i));
  memcpy(out + at, value, value_len);
  return at + value_len;
}

size_t zmtp_metadata(uint8_t *out, size_t cap, bool router)
{
  const char *type = router ? "ROUTER" : "DEALER";
  size_t at = put_property(out, cap, 0, "Socket-Type", type, strlen(type));
  return put_property(out, cap, at, "Identity", "", 0);
}

static bool type_fits(const uint8_t *type, size_t len, bool router)
{
  static const char *const for_router[] = {"DEALER", "REQ", "ROUTER"}, *const for_dealer[] = {"ROUTER", "DEALER", "REP"};
  const char *const *ok = router ? for_router : for_dealer;
  for (int i = 0; i < 3; i++)
    if (strlen(ok[i]) == len && memcmp(ok[i], type, len) == 0) return true;
  return false;
}

int zmtp_metadata_parse(const uint8_t *in, size_t n, bool router, const uint8_t **id_p, size_t *id_len_p,
                        const char **why_p)
{
  bool typed = false;
  *id_p = in, *id_len_p = 0;
  for (size_t at = 0; at < n;) {
    size_t name_len = in[at++];
    if (at + name_len + 4 > n) return *why_p = "malformed metadata", -1;
    const uint8_t *name = in + at;
    at += name_len;
    uint32_t value_len = (uint32_t)in[at] << 24 | (uint32_t)in[at + 1] << 16 | (uint32_t)in[at + 2] << 8 | in[at + 3];
    at += 4;
    if (value_len > n - at) return *why_p = "malformed metadata", -1;
    const uint8_t *value = in + at;
    at += value_len;
    if (name_len == 11 && memcmp(name, "Socket-Type", 11) == 0) {
      if (!type_fits(value, value_len, router)) return *why_p = "the peer's socket type does not fit", -1;
      typed = true;
    } else if (name_len == 8 && memcmp(name, "Identity", 8) == 0) {
      if (value_len > TSR_ZMTP_ID_MAX) return *why_p = "an identity longer than 255 bytes", -1;
      *id_p = value, *id_len_p = value_len;
    }
  }
  return typed ? 0 : (*why_p = "metadata without a Socket-Type", -1);
}
