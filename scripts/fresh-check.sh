#!/usr/bin/env bash
# Runs a command on a freshly installed Debian 12, to prove that the README's set-up
# commands need nothing that a development machine happens to have.
#
#   scripts/fresh-check.sh [--keep] 'COMMAND'
#   scripts/fresh-check.sh [--keep] --readme main|test   # one of README.md's two commands
#
# It builds a minimal Debian 12 root (debootstrap --variant=minbase bookworm from the
# Debian registry; the finished root is cached as a tarball, so later runs start in
# seconds), clones the current commit (HEAD: committed work only) into /root/seqto in that
# root, and runs COMMAND there as root in a chroot with a clean environment. From the
# host it carries only the network settings the package registries need: /etc/resolv.conf,
# the CA certificates under /usr/local/share/ca-certificates/, the host's CA bundle (as
# /etc/ssl/certs/ca-certificates.crt, also exported as NODE_EXTRA_CA_CERTS) and
# /etc/npmrc, /usr/etc/npmrc. Everything else (compilers, libraries, Node.js, data sets)
# must come from the project's own install step.
#
# The mounts (/proc, /sys, /dev) live in a private mount namespace, so they disappear with
# the command and never show on the host. The root is deleted afterwards unless --keep.
# Exit status: COMMAND's. Needs root, debootstrap and unshare (util-linux).
#
# Environment: FRESH_CHECK_CACHE (where the base tarball is kept; default
# ~/.cache/seqto/fresh-check), FRESH_CHECK_WORKDIR (where roots are made; default /var/tmp),
# FRESH_CHECK_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

usage() {
  echo "usage: scripts/fresh-check.sh [--keep] 'COMMAND' | --readme main|test" >&2
  exit 2
}
keep=0
if [ "${1:-}" = "--keep" ]; then
  keep=1
  shift
fi
if [ "${1:-}" = "--readme" ]; then
  [ $# -eq 2 ] || usage
  command_to_run=$("$(dirname "$0")/readme-command.sh" "$2") || exit 2
else
  [ $# -eq 1 ] && [ -n "$1" ] || usage
  command_to_run=$1
fi

die() {
  echo "fresh-check: $*" >&2
  exit 1
}
[ "$(id -u)" -eq 0 ] || die "must run as root (it uses debootstrap, chroot and mounts)"
for tool in debootstrap unshare chroot git tar; do
  command -v "$tool" >/dev/null || die "needs '$tool' (apt-get install debootstrap util-linux git tar)"
done

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
commit=$(git -C "$repo" rev-parse HEAD)
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  echo "fresh-check: note: uncommitted changes are not part of the check (it clones $commit)" >&2
fi

mirror=${FRESH_CHECK_MIRROR:-http://deb.debian.org/debian}
cache=${FRESH_CHECK_CACHE:-$HOME/.cache/seqto/fresh-check}
base_tarball=$cache/bookworm-minbase.tar.gz
workdir=$(mktemp -d "${FRESH_CHECK_WORKDIR:-/var/tmp}/seqto-fresh.XXXXXX")
root=$workdir/root

cleanup() {
  if [ "$keep" -eq 1 ]; then
    echo "fresh-check: root kept at $root" >&2
  elif [ -d "$workdir" ]; then
    # The mounts were private to the namespace of the command, which has ended; make
    # sure nothing is mounted below the root before deleting it.
    if findmnt -rno TARGET | grep -q "^$workdir/"; then
      echo "fresh-check: something is still mounted below $workdir; not deleting it" >&2
    else
      rm -rf "$workdir"
    fi
  fi
}
trap cleanup EXIT

# 1. The base system: a cached tarball of a finished minbase root, or a new debootstrap.
mkdir -p "$root"
if [ -f "$base_tarball" ]; then
  echo "fresh-check: base system from $base_tarball"
  tar -xzf "$base_tarball" -C "$root"
else
  echo "fresh-check: debootstrap --variant=minbase bookworm ($mirror)"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$workdir/debootstrap.log" 2>&1 ||
    die "debootstrap failed; its log: $workdir/debootstrap.log (kept)"
  # What a Debian 12 installation has: the updates and security suites, and /etc/hosts
  # (tests reach local servers as localhost).
  cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
  rm -f "$root/etc/resolv.conf"
  mkdir -p "$cache"
  tar -czf "$base_tarball.tmp" -C "$root" . && mv "$base_tarball.tmp" "$base_tarball"
  echo "fresh-check: base system cached as $base_tarball"
fi

# 2. The network settings the registries need, and nothing else from the host.
carry() {  # carry SOURCE [DEST]: copy a host file into the root if the host has it
  local source=$1 dest=${2:-$1}
  [ -e "$source" ] || return 0
  mkdir -p "$root$(dirname "$dest")"
  cp -L "$source" "$root$dest"
}
carry /etc/resolv.conf
carry /etc/npmrc
carry /usr/etc/npmrc
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -rL /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
host_bundle=""
for candidate in "${NODE_EXTRA_CA_CERTS:-}" /etc/ssl/certs/ca-certificates.crt; do
  if [ -n "$candidate" ] && [ -f "$candidate" ]; then
    host_bundle=$candidate
    break
  fi
done
ca_env=()
if [ -n "$host_bundle" ]; then
  carry "$host_bundle" /etc/ssl/certs/ca-certificates.crt
  ca_env=(NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt)
fi

# 3. The project: a clone of the current commit.
git clone -q --no-local "$repo" "$root/root/seqto"
git -C "$root/root/seqto" checkout -q --detach "$commit"
echo "fresh-check: cloned $commit into /root/seqto"

# 4. The command, as root, in a chroot, with a clean environment and private mounts.
echo "fresh-check: running: $command_to_run"
start=$(date +%s)
set +e
unshare --mount --propagation private -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin ROOT="$root" CMD="$command_to_run" \
  "${ca_env[@]}" bash -c '
    set -e
    mount -t proc proc "$ROOT/proc"
    mount -t sysfs sysfs "$ROOT/sys"
    mount --rbind /dev "$ROOT/dev"
    mount -t tmpfs -o mode=1777 tmpfs "$ROOT/dev/shm"
    exec chroot "$ROOT" env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      LANG=C.UTF-8 ${NODE_EXTRA_CA_CERTS:+NODE_EXTRA_CA_CERTS=$NODE_EXTRA_CA_CERTS} \
      bash -c "cd /root/seqto && $CMD" </dev/null
  '
status=$?
set -e
elapsed=$(($(date +%s) - start))
printf 'fresh-check: exit %d after %dm%02ds (commit %s): %s\n' "$status" $((elapsed / 60)) $((elapsed % 60)) \
  "${commit:0:12}" "$command_to_run"
exit "$status"
