#!/usr/bin/env bash
# Installs the build and test dependencies from Debian 12 packages (idempotent; root or sudo).
# Also installs the end-to-end test clients (npm: openai, ws, puppeteer-core) when tests/e2e has a
# lockfile. `--serve`: only what building and running the server needs (scripts/serve.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
serve_only=0
[[ "${1:-}" == --serve ]] && serve_only=1
packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libcaf-dev            # CAF 0.17.6: the actor runtime (core, io: BASP between processes, openssl: TLS)
  libssl-dev            # OpenSSL's headers, which libcaf_openssl's include
  libboost1.81-dev      # Asio + Beast (header-only part)
  libsimdjson-dev       # JSON in
  libpcre2-dev          # tokenizer pre-split regexes (Unicode properties, JIT)
  libutf8proc-dev       # tokenizer Unicode normalizers (NFC, NFD, NFKC, NFKD)
  libxxhash-dev         # prefix-cache block hashes
  libcli11-dev          # command-line flags
  libfmt-dev libspdlog-dev  # formatting and logging
  googletest libgtest-dev   # tests (the build configures them)
)
(( serve_only )) || packages+=(
  nodejs npm            # end-to-end tests with the official openai and ws clients
  chromium              # the playground's end-to-end test drives it through puppeteer-core
  clang-14 clang libclang-rt-14-dev  # sanitizer builds and libFuzzer (scripts/sanitize.sh)
  curl                  # scripts/build_tsan_caf.sh fetches CAF's source from the Debian mirror
  openssl               # tests/cluster makes its TLS test certificates with the openssl command
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere (e.g. a preinstalled Node.js); accept working binaries.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
if (( ${#missing[@]} )); then
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo=sudo
  echo "install_deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if (( ! serve_only )) && [[ -f "$root/tests/e2e/package-lock.json" && ! -d "$root/tests/e2e/node_modules" ]]; then
  (cd "$root/tests/e2e" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "install_deps: ok"
