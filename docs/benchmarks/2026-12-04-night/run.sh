#!/bin/bash
# Served: interference (68432f9 vs d33ce71 alternating) and against llama.cpp (d33ce71), two rounds.
cd /work/main
out=docs/benchmarks/2026-12-04-night; mkdir -p $out
{ echo "date: $(date -u +%FT%TZ)"; lscpu | grep -E '^(Model name|CPU family|Model):'; echo "load at start: $(cat /proc/loadavg)"; echo "base: 68432f9, new: d33ce71"; } > $out/machine.txt
NEW=/tmp/braid-d33; BASE=/tmp/braid-final
LLAMA=/root/.cache/llama-anchor/11434.0.0/build/bin/llama-server
wait_up() { for i in $(seq 90); do curl -sf localhost:$1/health >/dev/null && return; sleep 1; done; }
for r in 1 2; do
  for v in braid llama; do
    if [ $v = braid ]; then $NEW serve --port 8733 > $out/serve-scaling-$v-r$r.log 2>&1 &
    else $LLAMA -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 -np 16 -c 32768 --no-cache-prompt -nr --host 127.0.0.1 --port 8733 > $out/serve-scaling-$v-r$r.log 2>&1 &
    fi
    pid=$!; wait_up 8733
    $NEW bench scaling --url http://127.0.0.1:8733 --seed 7 --concurrency 1,16,32 --prompt-tokens 24 --max-tokens 64 --label $v --out $out/scaling-$v-r$r > $out/scaling-$v-r$r.txt 2>&1
    $NEW bench scaling --url http://127.0.0.1:8733 --seed 7 --concurrency 1 --requests-per-level 16 --prompt-tokens 24 --max-tokens 64 --label $v-c1x16 --out $out/c1x16-$v-r$r > $out/c1x16-$v-r$r.txt 2>&1
    kill $pid; wait $pid 2>/dev/null
  done
done
for t in 50 100 200; do
  for v in base new; do
    bin=$NEW; [ $v = base ] && bin=$BASE
    $bin serve --port 8732 --itl-target-ms $t > $out/serve-$v-$t.log 2>&1 &
    pid=$!; wait_up 8732
    $NEW bench interference --url http://127.0.0.1:8732 --seed 7 --decoders 4 --decode-tokens 400 \
      --long-prompt-tokens 1200 --long-prompts 3 --interval-secs 3 --label $v-$t --out $out/interference-$v-$t > $out/interference-$v-$t.txt 2>&1
    kill $pid; wait $pid 2>/dev/null
  done
done
echo "load at end: $(cat /proc/loadavg)" >> $out/machine.txt
echo SERVED-DONE >> $out/machine.txt
