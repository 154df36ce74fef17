/* CurveZMQ (rfc.zeromq.org/spec/26) as libzmq 4.3 speaks it: the
 * HELLO / WELCOME / INITIATE / READY handshake and MESSAGE boxes. The
 * boxes are libsodium's crypto_box (X25519, XSalsa20-Poly1305); a box on
 * the wire is the 16-byte tag and the ciphertext, NaCl's layout without
 * its zero padding. Nonces: 16-byte prefixes naming the command and an
 * 8-byte big-endian counter per direction (HELLO 1, INITIATE 2, messages
 * on; READY 1, messages on), each strictly above the last one seen.
 *
 * Keys: long-term C / c (client), S / s (server); short-term C' / c' and
 * S' / s' made per connection; the cookie is S's box of C' and s' under a
 * key only this connection's server side knows, so the server keeps no
 * state for a HELLO that goes nowhere. */
#include <sodium.h>
#include <string.h>

#include "zmtp_int.h"

#define HELLO_LEN 200
#define WELCOME_LEN 168
#define INITIATE_MIN 257
#define MAC 16

static void put_be64(uint8_t *out, uint64_t v)
{
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t get_be64(const uint8_t *in)
{
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | in[i];
  return v;
}

/* A 24-byte nonce: a 16-byte prefix and a counter, or an 8-byte prefix and
 * 16 given bytes. */
static void nonce_short(uint8_t n[24], const char *prefix16, uint64_t counter)
{
  memcpy(n, prefix16, 16);
  put_be64(n + 16, counter);
}

static void nonce_long(uint8_t n[24], const char *prefix8, const uint8_t *rest16)
{
  memcpy(n, prefix8, 8);
  memcpy(n + 8, rest16, 16);
}

int zmtp_keys_load(zmtp_keys *keys, const char *secret, const char *server, bool dealer, tsr_errbuf *err)
{
  memset(keys, 0, sizeof *keys);
  if (secret == NULL || secret[0] == '\0') return 0;
  if (sodium_init() < 0) return tsr_fail(err, TSR_EINVAL, "libsodium cannot start");
  if (tsr_zmtp_z85_decode(secret, keys->secret) != 0)
    return tsr_fail(err, TSR_EINVAL, "the secret key is not 40 characters of Z85");
  crypto_scalarmult_base(keys->public_, keys->secret);
  if (dealer && tsr_zmtp_z85_decode(server, keys->server) != 0)
    return tsr_fail(err, TSR_EINVAL, "the server's public key is not 40 characters of Z85");
  keys->on = true;
  return 0;
}

void zmtp_curve_start(zmtp_curve *cv)
{
  memset(cv, 0, sizeof *cv);
  crypto_box_keypair(cv->cn_public, cv->cn_secret);
  cv->nonce = 1;
  cv->peer_nonce = 0;
}

/* ---------- dealer (client) side ---------- */

size_t zmtp_curve_hello(zmtp_curve *cv, const zmtp_keys *keys, uint8_t *out)
{
  uint8_t n[24], zeros[64] = {0};
  nonce_short(n, "CurveZMQHELLO---", cv->nonce);
  memset(out, 0, HELLO_LEN);
  memcpy(out, "\x05HELLO\x01\x00", 8);
  memcpy(out + 80, cv->cn_public, 32);
  put_be64(out + 112, cv->nonce++);
  if (crypto_box_easy(out + 120, zeros, 64, n, keys->server, cv->cn_secret) != 0) return 0;
  return HELLO_LEN;
}

int zmtp_curve_on_welcome(zmtp_curve *cv, const zmtp_keys *keys, const uint8_t *in, size_t n, const char **why_p)
{
  if (n != WELCOME_LEN || !zmtp_is_command(in, n, "WELCOME")) return *why_p = "a malformed WELCOME", -1;
  uint8_t nonce[24], plain[128];
  nonce_long(nonce, "WELCOME-", in + 8);
  if (crypto_box_open_easy(plain, in + 24, 144, nonce, keys->server, cv->cn_secret) != 0)
    return *why_p = "cannot open the server's WELCOME (a wrong server key?)", -1;
  memcpy(cv->peer_cn, plain, 32);
  memcpy(cv->cookie, plain + 32, 96);
  sodium_memzero(plain, sizeof plain);
  if (crypto_box_beforenm(cv->precom, cv->peer_cn, cv->cn_secret) != 0) return *why_p = "a weak server key", -1;
  return 0;
}

size_t zmtp_curve_initiate(zmtp_curve *cv, const zmtp_keys *keys, const uint8_t *meta, size_t meta_len,
                           uint8_t *out, size_t cap)
{
  size_t plain_len = 128 + meta_len, total = 113 + MAC + plain_len;
  if (total > cap) return 0;
  uint8_t vouch_nonce[24], vouch_plain[64], nonce[24], plain[128 + 512];
  if (plain_len > sizeof plain) return 0;
  memcpy(vouch_nonce, "VOUCH---", 8);
  randombytes_buf(vouch_nonce + 8, 16);
  memcpy(vouch_plain, cv->cn_public, 32);
  memcpy(vouch_plain + 32, keys->server, 32);
  memcpy(plain, keys->public_, 32);
  memcpy(plain + 32, vouch_nonce + 8, 16);
  if (crypto_box_easy(plain + 48, vouch_plain, 64, vouch_nonce, cv->peer_cn, keys->secret) != 0) return 0;
  memcpy(plain + 128, meta, meta_len);
  memcpy(out, "\x08INITIATE", 9);
  memcpy(out + 9, cv->cookie, 96);
  nonce_short(nonce, "CurveZMQINITIATE", cv->nonce);
  put_be64(out + 105, cv->nonce++);
  if (crypto_box_easy_afternm(out + 113, plain, plain_len, nonce, cv->precom) != 0) return 0;
  return total;
}

int zmtp_curve_on_ready(zmtp_curve *cv, uint8_t *in, size_t n, const uint8_t **meta_p, size_t *meta_len_p,
                        const char **why_p)
{
  if (n < 14 + MAC || !zmtp_is_command(in, n, "READY")) return *why_p = "a malformed READY", -1;
  uint8_t nonce[24];
  memcpy(nonce, "CurveZMQREADY---", 16);
  memcpy(nonce + 16, in + 6, 8);
  size_t clen = n - 14 - MAC;
  if (crypto_box_open_detached_afternm(in + 14 + MAC, in + 14 + MAC, in + 14, clen, nonce, cv->precom) != 0)
    return *why_p = "cannot open the server's READY", -1;
  cv->peer_nonce = get_be64(in + 6);
  *meta_p = in + 14 + MAC, *meta_len_p = clen;
  return 0;
}

/* ---------- router (server) side ---------- */

int zmtp_curve_on_hello(zmtp_curve *cv, const zmtp_keys *keys, const uint8_t *in, size_t n, const char **why_p)
{
  if (n != HELLO_LEN || !zmtp_is_command(in, n, "HELLO")) return *why_p = "a malformed HELLO", -1;
  if (in[6] != 1 || in[7] != 0) return *why_p = "a HELLO of an unknown CurveZMQ version", -1;
  memcpy(cv->peer_cn, in + 80, 32);
  uint8_t nonce[24], plain[64];
  memcpy(nonce, "CurveZMQHELLO---", 16);
  memcpy(nonce + 16, in + 112, 8);
  if (crypto_box_open_easy(plain, in + 120, 80, nonce, cv->peer_cn, keys->secret) != 0)
    return *why_p = "the peer used a wrong server key", -1;
  cv->peer_nonce = get_be64(in + 112);
  return 0;
}

size_t zmtp_curve_welcome(zmtp_curve *cv, const zmtp_keys *keys, uint8_t *out)
{
  uint8_t cookie_nonce[24], cookie_plain[64], nonce[24], plain[128];
  memcpy(cookie_nonce, "COOKIE--", 8);
  randombytes_buf(cookie_nonce + 8, 16);
  randombytes_buf(cv->cookie_key, sizeof cv->cookie_key);
  memcpy(cookie_plain, cv->peer_cn, 32);
  memcpy(cookie_plain + 32, cv->cn_secret, 32);
  memcpy(plain, cv->cn_public, 32);
  memcpy(plain + 32, cookie_nonce + 8, 16);
  crypto_secretbox_easy(plain + 48, cookie_plain, 64, cookie_nonce, cv->cookie_key);
  sodium_memzero(cookie_plain, sizeof cookie_plain);
  memcpy(out, "\x07WELCOME", 8);
  randombytes_buf(out + 8, 16);
  nonce_long(nonce, "WELCOME-", out + 8);
  if (crypto_box_easy(out + 24, plain, 128, nonce, cv->peer_cn, keys->secret) != 0) return 0;
  return WELCOME_LEN;
}

int zmtp_curve_on_initiate(zmtp_curve *cv, uint8_t *in, size_t n, const uint8_t **meta_p, size_t *meta_len_p,
                           const char **why_p)
{
  if (n < INITIATE_MIN || !zmtp_is_command(in, n, "INITIATE")) return *why_p = "a malformed INITIATE", -1;
  uint8_t nonce[24], cookie[64];
  nonce_long(nonce, "COOKIE--", in + 9);
  if (crypto_secretbox_open_easy(cookie, in + 25, 80, nonce, cv->cookie_key) != 0 ||
      memcmp(cookie, cv->peer_cn, 32) != 0 || memcmp(cookie + 32, cv->cn_secret, 32) != 0)
    return *why_p = "an INITIATE with a bad cookie", -1;
  if (crypto_box_beforenm(cv->precom, cv->peer_cn, cv->cn_secret) != 0) return *why_p = "a weak client key", -1;
  memcpy(nonce, "CurveZMQINITIATE", 16);
  memcpy(nonce + 16, in + 105, 8);
  size_t clen = n - 113 - MAC;
  uint8_t *plain = in + 113 + MAC;
  if (get_be64(in + 105) <= cv->peer_nonce ||
      crypto_box_open_detached_afternm(plain, plain, in + 113, clen, nonce, cv->precom) != 0)
    return *why_p = "cannot open the client's INITIATE", -1;
  uint8_t vouch[64];
  nonce_long(nonce, "VOUCH---", plain + 32);
  if (crypto_box_open_easy(vouch, plain + 48, 80, nonce, plain, cv->cn_secret) != 0 ||
      memcmp(vouch, cv->peer_cn, 32) != 0)
    return *why_p = "the client's vouch does not hold", -1;
  cv->peer_nonce = get_be64(in + 105);
  memcpy(cv->client_key, plain, 32);
  *meta_p = plain + 128, *meta_len_p = clen - 128;
  return 0;
}

size_t zmtp_curve_ready(zmtp_curve *cv, const uint8_t *meta, size_t meta_len, uint8_t *out, size_t cap)
{
  if (14 + MAC + meta_len > cap) return 0;
  uint8_t nonce[24];
  memcpy(out, "\x05READY", 6);
  nonce_short(nonce, "CurveZMQREADY---", cv->nonce);
  put_be64(out + 6, cv->nonce++);
  memcpy(out + 14 + MAC, meta, meta_len);
  crypto_box_detached_afternm(out + 14 + MAC, out + 14, out + 14 + MAC, meta_len, nonce, cv->precom);
  return 14 + MAC + meta_len;
}

/* ---------- messages ---------- */

/* A router sends with the server's prefix and opens the client's. */
static const char *seal_prefix(bool router) { return router ? "CurveZMQMESSAGES" : "CurveZMQMESSAGEC"; }
static const char *open_prefix(bool router) { return router ? "CurveZMQMESSAGEC" : "CurveZMQMESSAGES"; }

void zmtp_curve_seal(zmtp_curve *cv, bool router, uint8_t flags, const void *payload, size_t len, uint8_t *out)
{
  uint8_t nonce[24];
  nonce_short(nonce, seal_prefix(router), cv->nonce);
  memcpy(out, "\x07MESSAGE", 8);
  put_be64(out + 8, cv->nonce++);
  uint8_t *plain = out + 16 + MAC;
  plain[0] = flags;
  if (len > 0) memcpy(plain + 1, payload, len);
  crypto_box_detached_afternm(plain, out + 16, plain, len + 1, nonce, cv->precom);
}

int zmtp_curve_open(zmtp_curve *cv, bool router, uint8_t *in, size_t n, uint8_t *flags_p, uint8_t **payload_p,
                    size_t *len_p, const char **why_p)
{
  if (n < ZMTP_CURVE_BOX_EXTRA || memcmp(in, "\x07MESSAGE", 8) != 0) return *why_p = "a malformed MESSAGE", -1;
  uint64_t counter = get_be64(in + 8);
  if (counter <= cv->peer_nonce) return *why_p = "a MESSAGE replayed or out of order", -1;
  uint8_t nonce[24];
  nonce_short(nonce, open_prefix(router), counter);
  uint8_t *plain = in + 16 + MAC;
  size_t clen = n - 16 - MAC;
  if (crypto_box_open_detached_afternm(plain, plain, in + 16, clen, nonce, cv->precom) != 0)
    return *why_p = "a MESSAGE that does not open", -1;
  cv->peer_nonce = counter;
  *flags_p = plain[0], *payload_p = plain + 1, *len_p = clen - 1;
  return 0;
}
