#!/usr/bin/env bash
# Installs the Debian packages WASTE builds and tests with. Idempotent; needs root (or sudo).
set -euo pipefail
pkgs=(
  build-essential pkg-config meson ninja-build python3
  capnproto libcapnp-dev          # manifest + RPC schemas, kj
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
  curl
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
