/* common/net/ucx_int — what xfer_ucx.c and xfer_ucx_serve.c share: the
 * process's UCP context, workers with a wakeup fd, addresses, closing an
 * endpoint. Only built with UCX (includes ucp.h). */
#ifndef TSR_COMMON_NET_UCX_INT_H
#define TSR_COMMON_NET_UCX_INT_H

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include "ucx.h"

/* A reply's header (a chunk header map or an error map) is small; more is
 * a broken or hostile peer. */
#define TSR_UCX_MAX_HEADER (TSR_MAX_TEXT_LEN + 4 * TSR_MAX_KEY_LEN)

/* The process's UCP contexts: ALL has the transports UCX_TLS allows;
 * LOCAL the same without tcp, for direct endpoints between processes of
 * one host (no epoll_wait in every progress: xfer_ucx.c). */
typedef enum { TSR_UCX_ALL = 0, TSR_UCX_LOCAL = 1 } tsr_ucx_scope;

/* A spin on a LOCAL worker progresses the listener's worker (tcp: an
 * epoll_wait system call a progress) once in this many rounds: for a dead
 * peer's error on the fetching side, for new connections on the serving. */
#define TSR_UCX_LISTENER_PROGRESS_EVERY 64

/* Takes a reference on a context, creating it on first use from the
 * environment (UCX_TLS, UCX_NET_DEVICES, ... are read here). Drop it with
 * tsr_ucx_context_drop of the same scope. 0, TSR_ECONN, or TSR_ENOTFOUND
 * (LOCAL when UCX_TLS allows only tcp). Any thread. */
int tsr_ucx_context_take(tsr_ucx_scope scope, ucp_context_h *ctx_p, tsr_errbuf *err);
void tsr_ucx_context_drop(tsr_ucx_scope scope);

/* A worker with the wakeup feature; *efd_p becomes readable when it has
 * events (after ucp_worker_arm). 0 or TSR_ECONN. */
int tsr_ucx_worker_new(ucp_context_h ctx, ucs_thread_mode_t mode, ucp_worker_h *worker_p, int *efd_p,
                       tsr_errbuf *err);

/* Resolves HOST (a name or an IPv4 literal, or "*" for any) and PORT to
 * an IPv4 address (UCX 1.13 mishandles IPv6 peers: xfer_ucx.c).
 * 0 or TSR_EINVAL naming the host. */
int tsr_ucx_sockaddr(const char *host, int port, struct sockaddr_storage *sa, socklen_t *len_p, tsr_errbuf *err);

/* Splits "HOST:PORT" (IPv6 literal in brackets) into host and port. 0 or
 * TSR_EINVAL. */
int tsr_ucx_split_hostport(const char *text, char *host, size_t cap, int *port_p, tsr_errbuf *err);

/* "tsr-host:BOOT_ID:NET:IPC:MNT:PID" (the namespaces' inode numbers):
 * equal in two processes that can share memory through UCX. Static. */
const char *tsr_ucx_host_identity(void);

/* Sets the worker's handler of AM id (whole messages). 0 or TSR_ECONN. */
int tsr_ucx_set_am_handler(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb, void *arg, tsr_errbuf *err);

/* Closes ep abortively (a dead peer is not waited for): requests on it
 * complete with an error. Progresses worker for at most a second. */
void tsr_ucx_ep_close(ucp_worker_h worker, ucp_ep_h ep);

#endif
