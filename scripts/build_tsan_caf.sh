#!/usr/bin/env bash
# Builds a ThreadSanitizer-instrumented libcaf_core (CAF 0.17.6, the version Debian 12 ships) from
# Debian's own upstream tarball, for the TSan phase of scripts/sanitize.sh. Debian's libcaf_core.so
# is not instrumented: TSan cannot see its mailbox and job-queue atomics and reports races in
# every actor handler (tests/sanitizers/tsan.supp).
#
# Only libcaf_core is built (no io, openssl, tools, examples, unit tests, python), with clang,
# -std=c++11 (as Debian's build), libstdc++ (CAF_NO_AUTO_LIBCPP: our code links libstdc++),
# -O1 -g -fsanitize=thread, as a two-file unity build: 57-180 s on two shared cores (141 separate
# files ran at a ~9 min pace).
# The result is installed into DIR/prefix: prefix/include holds CAF's headers with this build's
# generated caf/detail/build_config.hpp, prefix/lib/libcaf_core.so the library. A second run with
# the same tarball and flags does nothing (DIR/prefix/.stamp).
#
# Source: actor-framework_0.17.6.orig.tar.gz, checked against the SHA-256 pinned below (from the
# Debian source package's .dsc, actor-framework 0.17.6-2.1). Where it comes from, first that
# works: $CAF_SOURCE_TARBALL (a local copy), DIR/ (an earlier download), the URL that
# `apt-get source --print-uris` gives (where a deb-src entry is configured),
# else the same file in the Debian mirror's pool ($CAF_DEBIAN_MIRROR, deb.debian.org).
#
# Usage: scripts/build_tsan_caf.sh [DIR]   (default: build-tsan-caf in the repository root)
# Environment: JOBS (2), CXX_TSAN (clang++). Prints the prefix as its last line.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=$(mkdir -p "${1:-$root/build-tsan-caf}" && cd "${1:-$root/build-tsan-caf}" && pwd)
jobs=${JOBS:-2}
cxx=${CXX_TSAN:-clang++}

version=0.17.6
tarball=actor-framework_${version}.orig.tar.gz
sha256=e2bf5bd243f08bb7d8adde197cfe3e6d71314ed3378fe0692f8932f4c3b3928c
mirror=${CAF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
pool_url=$mirror/pool/main/a/actor-framework/$tarball

prefix=$dir/prefix
cxx_flags="-std=c++11 -fsanitize=thread -fno-omit-frame-pointer"
opt_flags="-O1 -g"
stamp="$sha256 $("$cxx" --version | head -1) $cxx_flags $opt_flags unity2"
if [[ -f $prefix/.stamp && "$(cat "$prefix/.stamp")" == "$stamp" && -f $prefix/lib/libcaf_core.so ]]; then
  echo "build_tsan_caf: up to date"
  echo "$prefix"
  exit 0
fi

log() { echo "build_tsan_caf: $*" >&2; }
verified() { [[ -f $1 ]] && echo "$sha256  $1" | sha256sum --check --status; }

download() {  # URL -> $dir/$tarball.part, then checked and moved into place
  local url=$1
  log "fetching $url"
  if command -v curl >/dev/null; then
    curl -fsSL --retry 3 --connect-timeout 20 -o "$dir/$tarball.part" "$url" || return 1
  else
    wget -q --tries=3 --timeout=20 -O "$dir/$tarball.part" "$url" || return 1
  fi
  if verified "$dir/$tarball.part"; then
    mv "$dir/$tarball.part" "$dir/$tarball"
  else
    log "SHA-256 mismatch for $url"
    rm -f "$dir/$tarball.part"
    return 1
  fi
}

fetch() {
  if [[ -n ${CAF_SOURCE_TARBALL:-} ]] && verified "$CAF_SOURCE_TARBALL"; then
    cp "$CAF_SOURCE_TARBALL" "$dir/$tarball"
    return 0
  fi
  verified "$dir/$tarball" && return 0
  local apt_url
  apt_url=$(cd "$dir" && apt-get source --print-uris "actor-framework=$version-2.1" 2>/dev/null |
            sed -n "s/^'\([^']*\/$tarball\)' .*/\1/p" | head -1) || true
  [[ -n $apt_url ]] && download "$apt_url" && return 0
  download "$pool_url" && return 0
  log "cannot get $tarball with SHA-256 $sha256 (set CAF_SOURCE_TARBALL to a local copy)"
  return 1
}

start=$(date +%s)
fetch
rm -rf "$dir/src" "$dir/build" "$prefix"
mkdir -p "$dir/src"
tar -xzf "$dir/$tarball" -C "$dir/src" --strip-components=1
# Unity batches of 71 files: libcaf_core's 141 sources in two translation units, one per core.
# CAF_NO_COMPILER_CHECK skips a try_run; ccache is off (two large unity files rarely hit).
cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_CXX_FLAGS_DEBUG="$opt_flags" \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=71 -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_LIBDIR=lib -DCAF_LOG_LEVEL=QUIET \
  -DCAF_NO_IO=yes -DCAF_NO_OPENSSL=yes -DCAF_NO_OPENCL=yes -DCAF_NO_PYTHON=yes -DCAF_NO_TOOLS=yes \
  -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_AUTO_LIBCPP=yes \
  -DCAF_NO_COMPILER_CHECK=yes -DCAF_NO_SUMMARY=yes >"$dir/cmake.log" 2>&1 ||
  { cat "$dir/cmake.log" >&2; exit 1; }
CCACHE_DISABLE=1 ninja -C "$dir/build" -j"$jobs" libcaf_core_shared >&2
cmake --install "$dir/build" >"$dir/install.log"
[[ -f $prefix/lib/libcaf_core.so && -f $prefix/include/caf/detail/build_config.hpp ]] ||
  { log "install did not produce $prefix/lib/libcaf_core.so and build_config.hpp"; exit 1; }
echo "$stamp" > "$prefix/.stamp"
log "libcaf_core $version with TSan in $prefix ($(( $(date +%s) - start )) s)"
echo "$prefix"
