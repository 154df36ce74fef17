#!/usr/bin/env bash
# Makes the Debian 12 base image the container tests build FROM, with
# debootstrap (no image registry here: docs/deploy.md, "Tested here"), and
# keeps it: a second run finds it and returns at once. Users build FROM a
# public image instead (docker/Dockerfile's BASE argument).
#
#   tests/containers/base-image.sh [IMAGE]    (default localhost/tessera-deploy/bookworm:base)
set -euo pipefail
image=${1:-${TSR_BASE_IMAGE:-localhost/tessera-deploy/bookworm:base}}
mirror=${TSR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if podman image exists "$image"; then
  echo "base-image: $image present (cached)"
  exit 0
fi
for tool in debootstrap podman; do
  command -v "$tool" >/dev/null || { echo "base-image: $tool is missing (scripts/install-deps.sh --deploy)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/tsr-rootfs-XXXXXX)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 || {
  tail -20 "$work/debootstrap.log" >&2; echo "base-image: debootstrap failed" >&2; exit 1; }
# As the public debian:bookworm image: updates and security too.
cat > "$work/rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SOURCES
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
tar -C "$work/rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "base-image: made $image with debootstrap in $(( $(date +%s) - start )) s"
