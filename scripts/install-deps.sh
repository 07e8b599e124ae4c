#!/usr/bin/env bash
# Installs the Debian packages WASTE builds and tests with. Idempotent; needs root (or sudo).
# Usage: scripts/install-deps.sh [--arch arm64]
#   --arch arm64  also what a cross build for arm64 needs (scripts/cross-arm64.sh): the cross
#                 compiler, qemu-user-static, and the arm64 (":arm64") packages of every library
#                 below. The native packages stay: the build runs meson, ninja and the capnp
#                 schema compiler of the build machine.
set -euo pipefail
cross=""
case "${1:-}" in
  "") ;;
  --arch) [ "${2:-}" = arm64 ] || { echo "install-deps: --arch takes arm64" >&2; exit 2; }; cross=arm64 ;;
  --arch=arm64) cross=arm64 ;;
  *) echo "usage: scripts/install-deps.sh [--arch arm64]" >&2; exit 2 ;;
esac
# Tools run on the build machine.
tools=(
  build-essential pkg-config meson ninja-build python3
  capnproto                       # the schema compiler (capnp, capnpc-c++)
  curl
)
# Libraries (headers and what they link): a cross build needs them for the target architecture.
libs=(
  libcapnp-dev                    # manifest + RPC schemas, kj
  libboost-dev                    # Boost.Interprocess (header-only)
  liburing-dev                    # io_uring
  libspdlog-dev                   # logging
  doctest-dev                     # unit tests
  libxxhash-dev                   # record checksums (xxh3-64)
  nlohmann-json3-dev              # config.json, safetensors headers, --json output
  libcli11-dev                    # command lines
  libpcre2-dev                    # tokenizer pre-split patterns
  libcpp-httplib-dev              # OpenAI-compatible HTTP front end
  libpng-dev libjpeg62-turbo-dev  # image inputs of the vision towers (shared/image)
)
pkgs=("${tools[@]}" "${libs[@]}")

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
apt_updated=0
apt_update() {
  [ $apt_updated = 1 ] && return
  $SUDO apt-get update -qq
  apt_updated=1
}

if [ -n "$cross" ]; then
  # The arm64 package lists exist only once the architecture is added and apt has been updated
  # since; update only when apt knows no arm64 version of a package every arm64 system has.
  if ! dpkg --print-foreign-architectures | grep -qx "$cross"; then
    echo "install-deps: dpkg --add-architecture $cross"
    $SUDO dpkg --add-architecture "$cross"
  fi
  apt-cache policy "libc6:$cross" 2>/dev/null | grep -q 'Candidate: [0-9]' || apt_update
  pkgs+=(crossbuild-essential-"$cross" qemu-user-static)
  for p in "${libs[@]}"; do
    # Architecture-independent packages (header-only, Multi-Arch: foreign) serve every
    # architecture from their native install; the others are needed as pkg:arm64. dpkg knows
    # the architecture of what is installed; apt-cache (slower) of the rest.
    arch=$(dpkg-query -W -f='${Architecture}' "$p" 2>/dev/null) ||
      arch=$(apt-cache show --no-all-versions "$p" 2>/dev/null | sed -n 's/^Architecture: //p' | head -n1)
    [ "$arch" = all ] || pkgs+=("$p:$cross")
  done
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
apt_update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
