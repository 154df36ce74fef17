/* `tessera keygen [--out DIR] [--force] [NAME]`: writes a ZeroMQ CURVE key
 * pair for a scheduler, worker or client (docs/security.md): DIR/NAME.key
 * holds the secret key (mode 0600, created so: never readable by others,
 * not even for an instant) and DIR/NAME.pub the public key, each one line
 * of Z85 text. NAME defaults to "tessera". An existing file is not
 * overwritten without --force. Prints the public key. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "cli.h"

static void keygen_usage(FILE *out)
{
  fprintf(out,
          "usage: tessera keygen [--out DIR] [--force] [NAME]\n"
          "  writes DIR/NAME.key (CURVE secret key, mode 0600) and DIR/NAME.pub (public key);\n"
          "  NAME defaults to tessera, DIR to the current directory; --force overwrites.\n"
          "  Give the scheduler --curve-secret NAME.key and put the workers' and clients' .pub\n"
          "  files in its --allow-keys directory (docs/security.md).\n");
}

/* Writes one line to path, created with mode (O_EXCL unless force). */
static int write_key(const char *path, const char *key, mode_t mode, bool force)
{
  int flags = O_WRONLY | O_CREAT | O_TRUNC | (force ? 0 : O_EXCL);
  int fd = open(path, flags, mode);
  if (fd < 0)
    return cli_error(CLI_EXIT_FAIL, "cannot create %s: %s%s", path, strerror(errno),
                     errno == EEXIST ? " (use --force to overwrite)" : "");
  char line[64];
  int len = snprintf(line, sizeof line, "%s\n", key);
  bool ok = write(fd, line, (size_t)len) == len && fchmod(fd, mode) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok) return cli_error(CLI_EXIT_FAIL, "cannot write %s: %s", path, strerror(errno));
  return 0;
}

int cli_keygen(int argc, char **argv)
{
  const char *dir = ".", *name = "tessera";
  bool force = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) return keygen_usage(stdout), 0;
    if (strcmp(argv[i], "--force") == 0) force = true;
    else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) dir = argv[++i];
    else if (argv[i][0] == '-') return cli_error(CLI_EXIT_USAGE, "keygen: unknown or incomplete flag '%s' (see --help)", argv[i]);
    else name = argv[i];
  }
  if (name[0] == '\0' || strchr(name, '/') != NULL)
    return cli_error(CLI_EXIT_USAGE, "keygen: NAME '%s' must be a plain file name (use --out DIR)", name);
  char public_key[41], secret_key[41], path[4096];
  if (zmq_curve_keypair(public_key, secret_key) != 0)
    return cli_error(CLI_EXIT_FAIL, "keygen: this libzmq has no CURVE support: %s", zmq_strerror(zmq_errno()));
  snprintf(path, sizeof path, "%s/%s.key", dir, name);
  int rc = write_key(path, secret_key, 0600, force);
  snprintf(path, sizeof path, "%s/%s.pub", dir, name);
  if (rc == 0) rc = write_key(path, public_key, 0644, force);
  if (rc == 0) printf("%s\n", public_key);
  return rc;
}
