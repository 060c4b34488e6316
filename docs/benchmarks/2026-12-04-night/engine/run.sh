#!/bin/bash
# three alternating rounds of the engine bench: bf90ae5, 68432f9, d33ce71
cd /work/main
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
out=/tmp/bench-d33
for r in 1 2 3; do
  for pair in bf90ae5:/tmp/tgt-bf90/release/braid 68432f9:/tmp/braid-final d33ce71:/tmp/braid-d33; do
    l=${pair%%:*}; b=${pair#*:}
    BRAID_KERNEL=avx512vnni $b bench-engine --model $M --threads 2 --json > $out/$l-r$r-short.json 2>/dev/null
    BRAID_KERNEL=avx512vnni $b bench-engine --model $M --threads 2 --context 4096 --batch 1 --batch 16 --prompt-tokens 64 --json > $out/$l-r$r-long.json 2>/dev/null
    echo "$l r$r load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log.txt
  done
done
echo DONE >> $out/log.txt
