/* common/net/xfer_int — private to the data plane (xfer*.c): its messages,
 * shared by the ZeroMQ and UCX transports so both speak the same maps, and
 * the parsing of data addresses that offer several transports.
 *
 * A data address is one endpoint or a comma-separated list of
 * alternatives for the same worker, most preferred first:
 *   "tcp://10.0.0.5:41000"                       ZeroMQ only
 *   "ucx://10.0.0.5:41001"                       UCX only
 *   "ucx://10.0.0.5:41001,tcp://10.0.0.5:41000"  both (--transport auto)
 * A CURVE key tag ("#curve=KEY") belongs to the tcp:// alternative. */
#ifndef TSR_COMMON_NET_XFER_INT_H
#define TSR_COMMON_NET_XFER_INT_H

#include "net.h"

/* {"op":"get","key":K} */
void tsr_xfer_pack_get(tsr_wbuf *wb, const char *key);
/* Decodes a get request into key. 0 or TSR_EPROTO with the reason. */
int tsr_xfer_decode_get(const void *data, size_t len, char *key, size_t cap, tsr_errbuf *err);
/* {"op":"error","key","code","message"} */
void tsr_xfer_pack_error(tsr_wbuf *wb, const char *key, int code, const char *message);
/* The chunk header map of chunk as key. */
void tsr_xfer_pack_chunk(tsr_wbuf *wb, const char *key, const tsr_xfer_chunk *chunk);
/* Decodes a reply to a get of key: 0 with hdr filled (and hdr->key ==
 * key), the peer's error code with its message, or TSR_EPROTO. */
int tsr_xfer_decode_reply(const void *data, size_t len, const char *key, tsr_chunk_header *hdr, tsr_errbuf *err);

/* Picks the alternative of address to fetch over, given this process's
 * preference and whether it can speak UCX: the preferred transport when
 * offered, else the other. Writes it (tag included) to endpoint and sets
 * *ucx_p. 0, or TSR_ECONN naming why none fits. */
int tsr_xfer_pick(const char *address, tsr_transport prefer, bool ucx_ok, char *endpoint, size_t cap, bool *ucx_p,
                  tsr_errbuf *err);

#endif
