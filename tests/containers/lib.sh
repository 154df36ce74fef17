# tests/containers/lib.sh — shared by the container tests (label deploy):
# podman set up as PLATFORM.md says works here, the base image made by
# debootstrap, the CPU image built from docker/Dockerfile, and small
# assertion helpers. Sourced, not run.
#
# Every check that fails prints FAIL with what it expected and exits 1;
# a missing tool is a failure too (scripts/install-deps.sh --deploy installs
# them), never a silent skip.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BASE_IMAGE=${TSR_BASE_IMAGE:-localhost/tessera-deploy/bookworm:base}
CPU_IMAGE=${TSR_CPU_IMAGE:-localhost/tessera-deploy/tessera:cpu}
BUILD_IMAGE=${CPU_IMAGE%:*}:build
PASSED=0

say() { echo "[$(date +%H:%M:%S)] $*" >&2; }
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { PASSED=$((PASSED + 1)); echo "ok: $*" >&2; }

need_tools() {
  for tool in "$@"; do
    command -v "$tool" >/dev/null || fail "$tool is missing: run scripts/install-deps.sh --deploy"
  done
}

# podman as PLATFORM.md found it works here: runc, and ulimits within the
# hard open-files limit (20000) that containers may not exceed. Networks
# through netavark, whose aardvark-dns lets containers find each other by
# service name (Debian's podman defaults to CNI without a DNS plugin).
setup_podman() {
  CONTAINERS_CONF=$(mktemp /tmp/tsr-containers-XXXXXX.conf)
  cat > "$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[network]
network_backend = "netavark"
[engine]
runtime = "runc"
EOF
  export CONTAINERS_CONF
}

# The base image (cached by its tag between runs), then the CPU image from
# docker/Dockerfile FROM it. Prints the build time and the image size.
build_cpu_image() {
  "$ROOT/tests/containers/base-image.sh" "$BASE_IMAGE" || fail "no base image"
  local old_build old_cpu start
  old_build=$(podman image inspect --format '{{.Id}}' "$BUILD_IMAGE" 2>/dev/null || true)
  old_cpu=$(podman image inspect --format '{{.Id}}' "$CPU_IMAGE" 2>/dev/null || true)
  start=$(date +%s)
  # The build's RUN steps on the host's network: they only fetch Debian
  # packages, and netavark's default bridge clashes with a CNI one that
  # Debian's podman may have made before (same 10.88.0.0/16).
  local args=(--network host --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 -f "$ROOT/docker/Dockerfile"
              --build-arg "BASE=$BASE_IMAGE")
  # The build stage tagged too, so the previous run's can be removed below
  # (each source change leaves a 1.4 GB stage otherwise).
  podman build -q "${args[@]}" --target build -t "$BUILD_IMAGE" "$ROOT" > /tmp/tsr-build-$$.log 2>&1 &&
    podman build -q "${args[@]}" -t "$CPU_IMAGE" "$ROOT" >> /tmp/tsr-build-$$.log 2>&1 ||
    { tail -40 /tmp/tsr-build-$$.log >&2; fail "podman build of docker/Dockerfile"; }
  rm -f /tmp/tsr-build-$$.log
  for old in "$old_build" "$old_cpu"; do
    if [ -n "$old" ] && ! podman image inspect --format '{{.Id}}' "$BUILD_IMAGE" "$CPU_IMAGE" | grep -q "$old"; then
      podman rmi "$old" >/dev/null 2>&1 || true
    fi
  done
  local size
  size=$(podman image inspect --format '{{.Size}}' "$CPU_IMAGE")
  IMAGE_MB=$((size / 1000000))
  say "image $CPU_IMAGE: $IMAGE_MB MB, built in $(( $(date +%s) - start )) s"
  echo "image size: $IMAGE_MB MB ($CPU_IMAGE, FROM $BASE_IMAGE)"
  # No compiler in the runtime image (the issue's multi-stage requirement).
  if podman run --rm "$CPU_IMAGE" sh -c 'command -v cc || command -v gcc || command -v cmake'; then
    fail "the runtime image holds a compiler"
  fi
  ok "runtime image holds no compiler"
}

# A free TCP port on this host.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# json_get 'EXPR' < json: evaluates a Python expression over the object d.
json_get() {
  python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"
}
