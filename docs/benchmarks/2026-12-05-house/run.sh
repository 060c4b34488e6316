#!/bin/bash
# Three alternating rounds of `braid bench-engine`, the build before issue 27 (959ee2e, as
# /tmp/braid-base) against the build after it (afa4d39, as /tmp/braid-new), each kernel.
# Writes ab2-ROUND-BUILD-KERNEL.json here. Run from the repository root with the default model.
set -euo pipefail
out=$(dirname "$0")
for r in 1 2 3; do
  for b in base new; do
    for k in avx512vnni avx2; do
      /tmp/braid-$b bench-engine --kernel $k --json --decode-steps 48 > "$out/ab2-$r-$b-$k.json"
    done
  done
done
