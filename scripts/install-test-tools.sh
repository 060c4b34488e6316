#!/usr/bin/env bash
# Installs, idempotently, the tools the end-to-end tests drive braid with: a local Python venv
# (.venv) with the official openai client, pytest, requests, schemathesis (OpenAPI fuzzer) and
# playwright (driving Debian's chromium, never a downloaded browser); oha (load generator); chromium.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests drive (chromium for the dashboard test, nginx for the replica
# tests) come from apt-get, which needs root. Say so before anything else is installed.
missing_debs=()
command -v chromium >/dev/null 2>&1 || missing_debs+=(chromium)
command -v nginx >/dev/null 2>&1 || missing_debs+=(nginx)
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
if ! .venv/bin/python -c "import openai, pytest, requests, playwright, schemathesis" 2>/dev/null; then
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
