#!/usr/bin/env bash
# The embedding figures of docs/PERFORMANCE.md (AMD EPYC family 25 model 17, 2 cores), build
# of 2026-12-05 (issue 29). Run from the repository root, machine otherwise idle.
#
# Throughput, braid against llama.cpp 11434 (its native build, made by hand)
# on the same weights, 2 threads each, both servers up, one measured at a time, 3 rounds:
#   .venv/bin/python scripts/minilm-to-gguf.py --outtype f32 models/all-MiniLM-L6-v2
#   llama-server -m models/all-MiniLM-L6-v2.f32.gguf --embedding --pooling mean -t 2 -np 4 -c 2048 --port 18120
#   target/release/braid serve --embedding-model models/all-MiniLM-L6-v2 --port 18121
#   for round in 1 2 3; do for port in 18120 18121; do
#     .venv/bin/python scripts/bench-embeddings.py --url http://127.0.0.1:$port --texts 1000 --batch 100 --clients 4 --seed $round
#   done; done          # -> v2-{llama,braid}-ROUND.json
#
# Embedding beside decoding streams (both models, default --itl-target-ms 100), 3 runs:
#   target/release/braid serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf --embedding-model models/all-MiniLM-L6-v2 --port 18122
#   .venv/bin/python scripts/bench-embeddings.py --url http://127.0.0.1:18122 --texts 1000 --batch 100 --clients 4 \
#     --decoders 4 --decode-tokens 3000 --seed RUN     # -> interf2-RUN.json
set -euo pipefail
echo "the commands are in this file's comments; they need two servers started by hand" >&2
