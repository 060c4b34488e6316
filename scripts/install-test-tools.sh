#!/usr/bin/env bash
# Installs, idempotently, the tools the end-to-end tests drive braid with: a local Python venv
# (.venv) with the official openai client, pytest, requests, schemathesis (OpenAPI fuzzer) and
# playwright (driving Debian's chromium, never a downloaded browser); oha (load generator); chromium.
set -euo pipefail
cd "$(dirname "$0")/.."

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
  echo "install-test-tools: installing Debian's chromium ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi

# deploy/ manifests: the official Kubernetes schemas, bundled (works offline), plus jsonschema
# and PyYAML for the custom resources' schemas in deploy/schemas/.
if ! .venv/bin/python -c "import kubernetes_validate, jsonschema, yaml" 2>/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check "kubernetes-validate==1.37.0"
fi

# scripts/replicas.sh puts braid replicas behind nginx.
if ! command -v nginx >/dev/null 2>&1; then
  echo "install-test-tools: installing Debian's nginx ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq nginx >/dev/null
fi
