#!/usr/bin/env bash
# The embedding figures of docs/PERFORMANCE.md (AMD EPYC family 25 model 17, Zen 4 with
# AVX-512 BF16, 2 cores), 2026-12-06: the bf16 BERT forward (braid-kernels/src/bf16.rs,
# braid-embedding/src/bert_encoder.rs). Run from the repository root, machine otherwise idle.
#
# Throughput, braid against llama.cpp 11434 (its native build, made by hand) on the same
# weights, 2 threads each, both servers up, one measured at a time, 3 rounds alternating:
#   .venv/bin/python scripts/minilm-to-gguf.py --outtype f32 models/all-MiniLM-L6-v2
#   llama-server -m models/all-MiniLM-L6-v2.f32.gguf --embedding --pooling mean -t 2 -np 4 -c 2048 --port 18120
#   target/release/braid serve --embedding-model models/all-MiniLM-L6-v2 --port 18121
#   for round in 1 2 3; do for port in 18120 18121; do
#     .venv/bin/python scripts/bench-embeddings.py --url http://127.0.0.1:$port --texts 1000 --batch 100 --clients 4 --seed $round
#   done; done          # -> v3-{llama,braid}-ROUND.json
#
# The same with braid forced to its AVX2 kernel (bf16 products as AVX2 FMAs), port 18123:
#   BRAID_KERNEL=avx2 target/release/braid serve --embedding-model models/all-MiniLM-L6-v2 --port 18123
#   (same loop over 18120 and 18123)   # -> avx2-{llama,braid-avx2}-ROUND.json
#
# Embedding beside decoding streams (both models, default --itl-target-ms 100), 3 runs:
#   target/release/braid serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf --embedding-model models/all-MiniLM-L6-v2 --port 18122
#   .venv/bin/python scripts/bench-embeddings.py --url http://127.0.0.1:18122 --texts 1000 --batch 100 --clients 4 \
#     --decoders 4 --decode-tokens 3000 --seed RUN     # -> interf3-RUN.json
set -euo pipefail
echo "the commands are in this file's comments; they need servers started by hand" >&2
