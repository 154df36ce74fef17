/* A msgpack scanner that allocates nothing. It exists because msgpack-c's
 * unpacker allocates an array's or map's objects from the count the sender
 * declares, before it has seen the elements: a five-byte message could ask
 * for gigabytes. Every element takes at least one byte, so a declared count
 * larger than the bytes that remain is a lie we can refuse up front. */
#include "wire.h"

static uint64_t read_be(const unsigned char *p, int n)
{
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = (v << 8) | p[i];
  return v;
}

/* Classifies the object starting with byte b whose following bytes start at
 * p (avail of them). Sets *head_p (length bytes consumed after b), *skip_p
 * (payload bytes) and *children_p (nested objects). Returns 0 or -1 for an
 * unsupported type. */
static int classify(unsigned char b, const unsigned char *p, size_t avail, uint64_t *head_p, uint64_t *skip_p,
                    uint64_t *children_p)
{
  static const signed char fixed_len[0x20] = {
    /* c0 nil */ 0, /* c1 */ -1, /* c2 */ 0, /* c3 */ 0, /* c4 bin8 */ -2, /* c5 */ -2, /* c6 */ -2,
    /* c7..c9 ext */ -1, -1, -1, /* ca f32 */ 4, /* cb f64 */ 8, /* cc..cf uint */ 1, 2, 4, 8,
    /* d0..d3 int */ 1, 2, 4, 8, /* d4..d8 fixext */ -1, -1, -1, -1, -1, /* d9..db str */ -2, -2, -2,
    /* dc dd array */ -3, -3, /* de df map */ -4, -4,
  };
  *head_p = *skip_p = *children_p = 0;
  if (b <= 0x7f || b >= 0xe0) return 0;
  if (b <= 0x8f) { *children_p = 2u * (b & 0x0f); return 0; }
  if (b <= 0x9f) { *children_p = b & 0x0f; return 0; }
  if (b <= 0xbf) { *skip_p = b & 0x1f; return 0; }
  int kind = fixed_len[b - 0xc0];
  if (kind == -1) return -1;
  if (kind >= 0) { *skip_p = (uint64_t)kind; return 0; }
  /* Length-prefixed: the width of the length field follows from the byte. */
  int width;
  if (b == 0xc4 || b == 0xd9) width = 1;
  else if (b == 0xc5 || b == 0xda || b == 0xdc || b == 0xde) width = 2;
  else width = 4;
  if ((size_t)width > avail) { *head_p = (uint64_t)width; *skip_p = UINT64_MAX; return 0; }
  uint64_t n = read_be(p, width);
  *head_p = (uint64_t)width;
  if (kind == -2) *skip_p = n;
  else if (kind == -3) *children_p = n;
  else *children_p = 2 * n;
  return 0;
}

/* Scans one complete object at *pos_p; 0 or TSR_EPROTO. */
static int scan_one(const unsigned char *data, size_t len, size_t *pos_p, tsr_errbuf *err)
{
  uint64_t pending[TSR_MAX_DEPTH + 1];
  int top = 0;
  size_t pos = *pos_p;
  pending[0] = 1;
  while (top >= 0) {
    if (pending[top] == 0) { top--; continue; }
    pending[top]--;
    if (pos >= len) return tsr_fail(err, TSR_EPROTO, "truncated msgpack at byte %zu", pos);
    unsigned char b = data[pos++];
    uint64_t head, skip, children;
    if (classify(b, data + pos, len - pos, &head, &skip, &children) != 0)
      return tsr_fail(err, TSR_EPROTO, "unsupported msgpack type 0x%02x at byte %zu", b, pos - 1);
    if (head > len - pos || skip > len - pos - head)
      return tsr_fail(err, TSR_EPROTO, "truncated msgpack at byte %zu", pos - 1);
    pos += head + skip;
    if (children == 0) continue;
    if (children > len - pos)
      return tsr_fail(err, TSR_EPROTO, "msgpack container at byte %zu declares %llu elements but only %zu bytes remain",
                      pos - 1 - head, (unsigned long long)children, len - pos);
    if (top + 1 > TSR_MAX_DEPTH) return tsr_fail(err, TSR_EPROTO, "msgpack nested deeper than %d", TSR_MAX_DEPTH);
    pending[++top] = children;
  }
  *pos_p = pos;
  return 0;
}

int tsr_wire_validate(const void *data, size_t len, tsr_errbuf *err)
{
  size_t pos = 0;
  int count = 0;
  if (len > TSR_MAX_FRAME_BYTES) return tsr_fail(err, TSR_EPROTO, "frame of %zu bytes exceeds the limit", len);
  if (len == 0) return tsr_fail(err, TSR_EPROTO, "empty frame");
  while (pos < len) {
    int rc = scan_one(data, len, &pos, err);
    if (rc != 0) return rc;
    if (count == INT32_MAX) return tsr_fail(err, TSR_EPROTO, "too many messages in one frame");
    count++;
  }
  return count;
}
