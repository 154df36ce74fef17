#!/usr/bin/env bash
# deploy.cloud: docker/cloud/. Checks, each of which fails the test:
#
#   1. user-data.yaml is valid for `cloud-init schema` (and a broken copy
#      is not: the validator is really checking);
#   2. user-data.yaml embeds docker/cloud/tessera-join.sh byte for byte and
#      is what make-user-data.sh makes (never stale);
#   3. the script joins a worker to a scheduler whose address it reads from
#      a metadata server over HTTP, run in a container as cloud-init would
#      run it (TESSERA_ENGINE=none: the container is the worker host; no
#      container engine runs inside a container here), and a client's
#      verified sum runs on that worker;
#   4. on a fresh Debian container (the debootstrap base, nothing
#      installed), the engine path as a dry run: the engine and the NVIDIA
#      toolkit installs, one container per GPU, the settings handed over;
#      a bad address is refused.
# Everything talks over loopback (host-network containers).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_tools podman cloud-init debootstrap python3
setup_podman

CLOUD=$ROOT/docker/cloud
WORK=$(mktemp -d /tmp/tsr-cloud-XXXXXX)
VM_IMAGE=${CPU_IMAGE%:*}:cloudvm
NAME=tsrcloud$$
META_PID=""

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    for c in "${NAME}-scheduler" "${NAME}-vm"; do
      echo "----- podman logs $c" >&2
      podman logs "$c" 2>&1 | tail -40 >&2 || true
    done
  fi
  podman rm -f "${NAME}-scheduler" "${NAME}-vm" >/dev/null 2>&1 || true
  [ -n "$META_PID" ] && kill "$META_PID" 2>/dev/null || true
  rm -rf "$WORK" "$CONTAINERS_CONF"
  exit "$rc"
}
trap cleanup EXIT

start=$(date +%s)
# ---- 1. the schema
cloud-init schema --config-file "$CLOUD/user-data.yaml" > "$WORK/schema.log" 2>&1 ||
  { cat "$WORK/schema.log" >&2; fail "cloud-init schema rejects docker/cloud/user-data.yaml"; }
grep -q "Valid cloud-config" "$WORK/schema.log" || fail "cloud-init schema said: $(cat "$WORK/schema.log")"
sed 's/^runcmd:$/runcmd: 5/' "$CLOUD/user-data.yaml" > "$WORK/broken.yaml"
if cloud-init schema --config-file "$WORK/broken.yaml" > /dev/null 2>&1; then
  fail "cloud-init schema accepts a broken user-data (runcmd: 5): it checks nothing"
fi
ok "cloud-init schema: user-data.yaml valid, a broken copy refused"

# ---- 2. the embedded script is the tested one
"$CLOUD/make-user-data.sh" "$WORK/user-data.yaml"
cmp -s "$WORK/user-data.yaml" "$CLOUD/user-data.yaml" || fail "user-data.yaml is stale: run docker/cloud/make-user-data.sh"
python3 - "$CLOUD/user-data.yaml" "$CLOUD/tessera-join.sh" <<'EOF' || fail "user-data.yaml does not embed tessera-join.sh verbatim"
import sys, yaml
files = yaml.safe_load(open(sys.argv[1]))["write_files"]
script = [f["content"] for f in files if f["path"] == "/usr/local/sbin/tessera-join"]
sys.exit(0 if script == [open(sys.argv[2]).read()] else 1)
EOF
ok "user-data.yaml embeds docker/cloud/tessera-join.sh verbatim"

# ---- 3. a real join: metadata over HTTP, the worker joins, a client runs
build_cpu_image
# The "VM": the CPU image plus curl, which cloud images have.
printf 'FROM %s\nRUN apt-get update -qq && apt-get install -y -qq --no-install-recommends curl && rm -rf /var/lib/apt/lists/*\n' \
  "$CPU_IMAGE" > "$WORK/Containerfile"
podman build -q --network host -f "$WORK/Containerfile" -t "$VM_IMAGE" "$WORK" > "$WORK/vm-build.log" 2>&1 ||
  { cat "$WORK/vm-build.log" >&2; fail "building the VM image"; }
SPORT=$(free_port)
MPORT=$(free_port)
SCHED=tcp://127.0.0.1:$SPORT
mkdir -p "$WORK/meta/computeMetadata/v1/instance/attributes"
printf '%s' "$SCHED" > "$WORK/meta/computeMetadata/v1/instance/attributes/tessera-scheduler"
python3 -m http.server "$MPORT" --bind 127.0.0.1 --directory "$WORK/meta" > "$WORK/meta.log" 2>&1 &
META_PID=$!
podman run -d --name "${NAME}-scheduler" --network host -e "TESSERA_SCHEDULER_LISTEN=$SCHED" "$CPU_IMAGE" \
  tessera-scheduler > /dev/null || fail "starting the scheduler container"
podman run -d --name "${NAME}-vm" --network host --hostname cloudvm1 \
  -v "$CLOUD/tessera-join.sh:/usr/local/sbin/tessera-join:ro" \
  -e TESSERA_ENGINE=none -e TESSERA_GPUS=auto -e TESSERA_MEMORY_LIMIT=256MiB -e TESSERA_THREADS=1 \
  -e "TESSERA_METADATA_URL=http://127.0.0.1:$MPORT/computeMetadata/v1/instance/attributes/tessera-scheduler" \
  --entrypoint /usr/local/sbin/tessera-join "$VM_IMAGE" > /dev/null || fail "starting the VM container"
healthy=""
for _ in $(seq 1 60); do
  if podman exec "${NAME}-scheduler" tessera health --scheduler "$SCHED" --worker cloudvm1 > /dev/null 2>&1; then
    healthy=yes
    break
  fi
  sleep 0.5
done
[ -n "$healthy" ] || fail "the worker cloudvm1 did not join $SCHED within 30 s"
podman logs "${NAME}-vm" > "$WORK/vm.log" 2>&1
grep -q "tessera-join: scheduler: $SCHED" "$WORK/vm.log" || fail "tessera-join did not log the address it read"
grep -q 'GET /computeMetadata/v1/instance/attributes/tessera-scheduler' "$WORK/meta.log" ||
  fail "the metadata server was never asked"
limit=$(podman exec "${NAME}-scheduler" tessera status --scheduler "$SCHED" --json |
  json_get '[w["memory_limit"] for w in d["workers"] if w["name"] == "cloudvm1"][0]')
[ "$limit" = 268435456 ] || fail "the worker's memory limit is $limit, not TESSERA_MEMORY_LIMIT=256MiB"
podman run --rm --network host -e "TESSERA_SCHEDULER=$SCHED" "$CPU_IMAGE" \
  tsr-sum-random --n 2000000 --chunk 200000 --verify > "$WORK/sum.log" 2>&1 || { cat "$WORK/sum.log" >&2; fail "client sum"; }
grep -q '^verified' "$WORK/sum.log" || fail "the client's sum was not verified"
ok "tessera-join read the scheduler from metadata over HTTP; worker cloudvm1 joined with its settings; a verified sum ran"

# ---- 4. the engine path on a fresh Debian container, as a dry run
dry() {
  podman run --rm --network none -v "$CLOUD/tessera-join.sh:/usr/local/sbin/tessera-join:ro" \
    -e TESSERA_DRY_RUN=1 -e TESSERA_SCHEDULER_ADDRESS=tcp://sched.internal:8786 -e TESSERA_MEMORY_LIMIT=8GiB "$@" \
    "$BASE_IMAGE" /usr/local/sbin/tessera-join
}
dry -e TESSERA_GPUS=none > "$WORK/dry-cpu.log" 2>&1 || { cat "$WORK/dry-cpu.log" >&2; fail "dry run, CPU"; }
for want in "+ apt-get install -y -qq docker.io" "TESSERA_MEMORY_LIMIT=8GiB" "TESSERA_SCHEDULER_ADDRESS=tcp://sched.internal:8786" \
            "+ docker run -d --name tessera-worker --restart unless-stopped --network host" "tessera:cpu tessera-worker"; do
  grep -qF -- "$want" "$WORK/dry-cpu.log" || { cat "$WORK/dry-cpu.log" >&2; fail "the CPU dry run lacks: $want"; }
done
dry -e TESSERA_GPUS=2 > "$WORK/dry-gpu.log" 2>&1 || { cat "$WORK/dry-gpu.log" >&2; fail "dry run, GPUs"; }
for want in "nvidia-container-toolkit" "nvidia-ctk runtime configure --runtime=docker" "--gpus device=0" "--gpus device=1" \
            "tessera:cuda tessera-worker --gpu 0" "started 2 GPU workers"; do
  grep -qF -- "$want" "$WORK/dry-gpu.log" || { cat "$WORK/dry-gpu.log" >&2; fail "the GPU dry run lacks: $want"; }
done
if podman run --rm --network none -v "$CLOUD/tessera-join.sh:/usr/local/sbin/tessera-join:ro" -e TESSERA_DRY_RUN=1 \
     -e TESSERA_SCHEDULER_ADDRESS=sched:8786 "$BASE_IMAGE" /usr/local/sbin/tessera-join > "$WORK/bad.log" 2>&1; then
  fail "a bad scheduler address was accepted"
fi
grep -q 'is not tcp://HOST:PORT' "$WORK/bad.log" || fail "the bad address's message: $(cat "$WORK/bad.log")"
ok "fresh Debian: engine and GPU toolkit installs, one container per GPU, settings handed over (dry run); a bad address refused"

echo "deploy.cloud: $PASSED checks passed in $(( $(date +%s) - start )) s"
