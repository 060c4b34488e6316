#!/usr/bin/env bash
# Installs, idempotently, the tools the end-to-end tests drive braid with: a local Python venv
# (.venv) with the official openai client, pytest and pytest-xdist (scripts/test.sh runs two
# test files at a time), requests, schemathesis (OpenAPI fuzzer), lm-eval
# (lm-evaluation-harness, its API models only, no torch), vllm-router (vLLM's router, a Rust
# binary in a wheel), tokenizers and langchain-openai (the embedding tests) and playwright
# (driving Debian's chromium, never a downloaded browser); oha (load generator); chromium; and
# for the Arm tests (scripts/test-arm.sh) the aarch64 Rust target, cross linker and qemu.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests drive (chromium for the dashboard test, nginx for the replica
# tests, the cross toolchain and qemu for the Arm tests) come from apt-get, which needs root.
# Say so before anything else is installed.
missing_debs=()
command -v chromium >/dev/null 2>&1 || missing_debs+=(chromium)
command -v nginx >/dev/null 2>&1 || missing_debs+=(nginx)
# scripts/test-arm.sh: the aarch64 linker and C library (.cargo/config.toml names them), and
# qemu-user to run the cross-compiled tests on this x86 machine.
arm_debs=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || arm_debs+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/libc.so ] || arm_debs+=(libc6-dev-arm64-cross)
command -v qemu-aarch64-static >/dev/null 2>&1 || arm_debs+=(qemu-user-static)
missing_debs+=("${arm_debs[@]}")
if [ ${#missing_debs[@]} -gt 0 ] && [ "$(id -u)" != 0 ]; then
  echo "install-test-tools: the tests need Debian's ${missing_debs[*]}, installed with apt-get, which needs root." >&2
  echo "install-test-tools: run scripts/test.sh as root once, or install them yourself: sudo apt-get install ${missing_debs[*]}" >&2
  exit 1
fi
apt_install() {
  echo "install-test-tools: installing Debian's $* ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "$@" >/dev/null
}

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import openai, pytest, xdist, requests, playwright, schemathesis, lm_eval, vllm_router, tokenizers, langchain_openai, jsonschema, anthropic, agents" 2>/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check -r tests/e2e/requirements.txt
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v oha >/dev/null 2>&1; then
  echo "install-test-tools: building oha (cargo install --locked oha) ..." >&2
  cargo install --locked --quiet oha
fi

if ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium
fi

# deploy/ manifests: the official Kubernetes schemas, bundled (works offline), plus jsonschema
# and PyYAML for the custom resources' schemas in deploy/schemas/.
if ! .venv/bin/python -c "import kubernetes_validate, jsonschema, yaml" 2>/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check "kubernetes-validate==1.37.0"
fi

# scripts/replicas.sh puts braid replicas behind nginx.
if ! command -v nginx >/dev/null 2>&1; then
  apt_install nginx
fi

# scripts/test-arm.sh cross-compiles braid-model for aarch64 and runs its tests under qemu.
if [ ${#arm_debs[@]} -gt 0 ]; then
  apt_install "${arm_debs[@]}"
fi
if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  echo "install-test-tools: adding the Rust target aarch64-unknown-linux-gnu ..." >&2
  rustup target add aarch64-unknown-linux-gnu
fi
