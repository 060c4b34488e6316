cd "$(dirname "$0")/../../.."
for i in 1 2 3; do for k in avx512vnni avx2; do
target/release/braid bench-engine --kernel $k --batch 1,16 --context 4096 --decode-steps 32 --json > docs/benchmarks/2026-12-05-prompts/long-$k-$i.json 2>/dev/null
target/release/braid bench-engine --kernel $k --prompt-tokens 512 --batch 1,16 --context 128 --decode-steps 48 --json > docs/benchmarks/2026-12-05-prompts/short-$k-$i.json 2>/dev/null
done; done
