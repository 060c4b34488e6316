#!/usr/bin/env bash
# Fetches the model if it is missing, builds braid, and serves on 127.0.0.1:8080.
# Extra arguments go to `braid serve` (e.g. scripts/serve.sh --port 9000 --max-num-seqs 16,
# or scripts/serve.sh --model models/gemma-3-270m-q4_k_m.gguf for the second model).
# Only a model scripts/fetch-model.sh knows is fetched: the default one when no --model (or
# BRAID_MODEL) is given, Gemma 3 270M when that is the file asked for, all-MiniLM-L6-v2 when
# --embedding-model names models/all-MiniLM-L6-v2 (given alone, braid then only embeds); any
# other path, and a model from a hub (--hf-repo), is braid's to find.
set -euo pipefail
cd "$(dirname "$0")/.."

model=${BRAID_MODEL:-}
embedding=
hub=
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --model) model=${args[i + 1]:-} ;;
    --model=*) model=${args[i]#--model=} ;;
    --embedding-model) embedding=${args[i + 1]:-} ;;
    --embedding-model=*) embedding=${args[i]#--embedding-model=} ;;
    --hf-repo | --hf-repo=*) hub=1 ;;
  esac
done
# Without --model braid serves the default model, unless --embedding-model is given alone.
if [ -z "$model" ] && [ -z "$embedding" ]; then
  model=models/SmolLM2-135M-Instruct.Q4_1.gguf
fi
case "${hub:+hub}$model" in
  models/SmolLM2-135M-Instruct.Q4_1.gguf | ./models/SmolLM2-135M-Instruct.Q4_1.gguf) scripts/fetch-model.sh ;;
  models/gemma-3-270m-q4_k_m.gguf | ./models/gemma-3-270m-q4_k_m.gguf) scripts/fetch-model.sh gemma3-270m ;;
esac
case "${embedding%/}" in
  models/all-MiniLM-L6-v2 | ./models/all-MiniLM-L6-v2) scripts/fetch-model.sh all-minilm-l6-v2 ;;
esac

target="${CARGO_TARGET_DIR:-target}/release/braid"
if [ ! -x "$target" ]; then
  echo "serve: building braid in release mode; the first build takes about 12 minutes on 2 cores" >&2
fi
cargo build --release --bin braid
exec "$target" serve "$@"
