#!/usr/bin/env bash
# Docker for sandboxes: Debian's docker.io, dockerd started if not running, and the
# sandbox base image built from Debian packages with debootstrap + docker import
# (no registry is reachable). The image is tagged by a hash of its recipe, so an
# unchanged recipe is never rebuilt.
source "$(dirname "$0")/lib.sh"

SUITE="${RATCHET_SANDBOX_SUITE:-bookworm}"
IMAGE_REPO="ratchet-sandbox"
RECIPE="$RATCHET_ROOT/infra/sandbox/packages.txt"

ensure_docker_installed() {
  command -v dockerd >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 && return 0
  apt_install docker.io debootstrap
}

ensure_dockerd_running() {
  # One start at a time: after a crash the stack's supervisor and a person may both start it.
  mkdir -p "$RATCHET_HOME/run"
  exec 9>"$RATCHET_HOME/run/dockerd.start-lock"
  flock 9
  if docker info >/dev/null 2>&1; then return 0; fi
  log "starting dockerd (log: $RATCHET_LOGS/dockerd.log)"
  # Started detached so it outlives this script; `ratchet down` leaves it running on purpose.
  setsid nohup dockerd >>"$RATCHET_LOGS/dockerd.log" 2>&1 </dev/null 9>&- &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 1
  done
  die "dockerd did not become ready in 60 s. See $RATCHET_LOGS/dockerd.log. Fix: check that this machine allows running dockerd as root (cgroups, iptables), then rerun infra/docker.sh"
}

image_tag() { RECIPE_EXTRA="$SUITE:$(uname -m):v2" recipe_hash "$RECIPE" "$RATCHET_ROOT/infra/docker.sh"; }

build_sandbox_image() {
  local tag; tag="$IMAGE_REPO:$(image_tag)"
  if docker image inspect "$tag" >/dev/null 2>&1; then
    log "sandbox image $tag present"
  else
    need_free_disk 3 "$RATCHET_HOME"
    local rootfs="$RATCHET_HOME/build/sandbox-rootfs"
    rm -rf "$rootfs"; mkdir -p "$rootfs"
    local pkgs; pkgs=$(grep -v '^#' "$RECIPE" | grep -v '^$' | paste -sd, -)
    log "debootstrap $SUITE with: $pkgs (log: $RATCHET_LOGS/debootstrap.log)"
    debootstrap --variant=minbase --include="$pkgs" "$SUITE" "$rootfs" >"$RATCHET_LOGS/debootstrap.log" 2>&1 \
      || die "debootstrap failed; see $RATCHET_LOGS/debootstrap.log. Fix: check that Debian's mirror is reachable (apt-get update) and the disk has space"
    # The agent runs as an unprivileged user whose only writable place is its tmpfs work dir.
    chroot "$rootfs" /usr/sbin/groupadd -g 1000 agent
    chroot "$rootfs" /usr/sbin/useradd -u 1000 -g 1000 -d /work -M -s /bin/bash agent
    mkdir -p "$rootfs/work" "$rootfs/src"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import \
      --change 'USER agent' --change 'WORKDIR /work' --change 'ENV HOME=/work LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1' \
      --change 'CMD ["sleep","infinity"]' - "$tag" >/dev/null
    rm -rf "$rootfs"
    log "built sandbox image $tag"
  fi
  docker tag "$tag" "$IMAGE_REPO:latest"
  printf '%s' "$tag" >"$RATCHET_HOME/sandbox-image"
}

case "${1:-setup}" in
  setup)
    ensure_docker_installed
    ensure_dockerd_running
    timed sandbox-image build_sandbox_image
    ;;
  image-tag) image_tag ;;
  start) ensure_dockerd_running ;;
  *) die "usage: infra/docker.sh [setup|start|image-tag]" ;;
esac
