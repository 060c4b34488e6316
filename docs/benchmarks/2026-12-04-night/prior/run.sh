#!/bin/bash
# interference: d33ce71 vs the prior-headroom build, alternating, two rounds
cd /work/main
out=/tmp/interf-prior; mkdir -p $out
for r in 1 2; do
for t in 50 100 200; do
  for v in d33 prior; do
    bin=/tmp/braid-$v
    $bin serve --port 8735 --itl-target-ms $t > $out/serve-$v-$t-r$r.log 2>&1 &
    pid=$!
    for i in $(seq 90); do curl -sf localhost:8735/health >/dev/null && break; sleep 1; done
    /tmp/braid-d33 bench interference --url http://127.0.0.1:8735 --seed 7 --decoders 4 --decode-tokens 400 \
      --long-prompt-tokens 1200 --long-prompts 3 --interval-secs 3 --label $v-$t-r$r --out $out/interference-$v-$t-r$r > $out/interference-$v-$t-r$r.txt 2>&1
    kill $pid; wait $pid 2>/dev/null
  done
done
done
echo DONE > $out/done
