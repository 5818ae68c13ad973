#!/usr/bin/env bash
# Installs dependencies, builds, and starts the server on the bundled default model
# (tests/data/models/llama-tiny; the CUDA executor when a GPU is present, else the CPU one).
# Extra arguments go to `actorserve serve` and override the defaults, e.g. --port 9000.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh" --serve
TARGETS=actorserve "$root/scripts/build.sh"  # the server only; scripts/test.sh builds the rest
exec "${BUILD_DIR:-$root/build}/server/actorserve" serve \
  --model "$root/tests/data/models/llama-tiny" \
  --chat-template "$root/tests/data/chat_templates/templates/meta-llama-3-8b-instruct.jinja" \
  --served-model-name llama-tiny "$@"
