#!/usr/bin/env bash
# Instructions per gate check, counted by valgrind (callgrind), for each body size and case of
# bench/criterion/gate.rs. Steady where wall-clock figures are not: a count moves between runs (hash
# seeds, the allocator) by about 0.1% at 16 KiB and 0.4% at 256 KiB with eight checks (a
# single check moved by 1.5%), so each size is checked at least eight times per run.
# Compare two commits by running it in a worktree of each.
#
#   bench/gate/icount.sh            # needs valgrind; CASES="gate reader" for some cases only
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v valgrind >/dev/null || { echo "icount.sh needs valgrind" >&2; exit 1; }
cargo bench --bench gate_icount --no-run
binary=$(ls -t target/release/deps/gate_icount-* | grep -v '\.d$' | head -1)
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$binary" "$@" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "| body | case | instructions per check |"
echo "| --- | --- | ---: |"
for size in 16384 262144 1048576; do
  times=$(( 327680 / size > 8 ? 327680 / size : 8 ))
  for case in ${CASES:-floor reader parse gate item_profile next_turn first_seen}; do
    base=$(count "$case" "$size" 0)
    total=$(count "$case" "$size" "$times")
    printf '| %s | %s | %s |\n' "$(( size / 1024 )) KiB" "$case" "$(( (total - base) / times ))"
  done
done
