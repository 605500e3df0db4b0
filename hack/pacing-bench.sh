#!/usr/bin/env bash
# The pacer's two figures of issue 47 (docs/pacing.md, docs/benchmarks.md):
#   (a) random 429s: create+delete pairs/s of the default (paced) driver
#       against the same driver with --adaptive-retry-mode=false, in pairs
#       (--compare-driver-arg: same seed, a fresh emulator and driver each,
#       default first), PACING_RUNS pairs; the target is a ratio of at
#       least 0.8 in every pair;
#   (b) the token bucket (Create/DeleteAccessPoint 20/s burst 20,
#       DescribeAccessPoints 50/s; the shape make bench runs, duplicates
#       and deletes during creates on): CreateAccessPoint requests per
#       volume and pairs/s, default and unpaced; the target is at most 1.5
#       requests per volume at the unpaced driver's pairs/s or better.
# Every run must be clean. Usage (after make build):
#   hack/pacing-bench.sh            # PACING_RUNS=10 PACING_BUCKET_RUNS=3
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PACING_BIN:-bin}
runs=${PACING_RUNS:-10}
bucket_runs=${PACING_BUCKET_RUNS:-3}
out=${PACING_OUT:-$(mktemp -d /tmp/pacing-bench.XXXXXX)}
mkdir -p "$out"
echo "pacing-bench: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- pkg cmd internal || echo ' (with uncommitted changes)'), load $(cut -d' ' -f1-3 /proc/loadavg), out $out"

# fig FILE NAME COLUMN: a figure of the comparison table (2 default, 3 unpaced, 4 ratio).
fig() { awk -v n="$2" -v c="$3" 'index($0, n) == 1 { s = substr($0, length(n) + 1); split(s, f, " "); print f[c - 1] }' "$1" | tail -1; }
storm() { # NAME ARGS...: one pair; prints its figures
	local name=$1; shift
	local log=$out/$name.out
	local rc=0
	"$bin/efs-csi-stress" --embedded --chaos=false --progress=false \
		--compare-driver-arg=--adaptive-retry-mode=false --out-dir "$out/$name" "$@" >"$log" 2>&1 || rc=$?
	local engaged
	engaged=$(grep -c 'adaptive pacing engaged' "$out/$name/driver.log" || true)
	printf '%-10s pairs/s %7s / %7s  ratio %5s  CreateAccessPoint req/vol %5s / %5s  engaged %s  exit %s\n' "$name" \
		"$(fig "$log" 'create+delete vol/s' 2)" "$(fig "$log" 'create+delete vol/s' 3)" "$(fig "$log" 'create+delete vol/s' 4)" \
		"$(fig "$log" 'CreateAccessPoint requests/volume' 2)" "$(fig "$log" 'CreateAccessPoint requests/volume' 3)" "$engaged" "$rc"
}

echo "(a) random-throttle (5% 429s), 300 volumes, 100 workers, no duplicates; default / unpaced"
for i in $(seq "$runs"); do
	storm "random-$i" --volumes 300 --concurrency 100 --duplicate-rate 0 --timeout 10s --fault-profile random-throttle
done | tee "$out/random.txt"
awk '{ print $7 }' "$out/random.txt" | sort -n | awk '{ v[++n] = $1; if ($1 >= 0.8) ok++ } END { printf "(a) ratio median %.2f, min %.2f, max %.2f, %d of %d >= 0.8\n", (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2), v[1], v[n], ok, n }'

echo "(b) token-bucket, 200 volumes, 100 workers, make bench's shape (--delete-access-point-root-dir=false); default / unpaced"
for i in $(seq "$bucket_runs"); do
	storm "bucket-$i" --volumes 200 --concurrency 100 --fault-profile token-bucket --seed "$i" \
		--driver-arg=--delete-access-point-root-dir=false
done | tee "$out/bucket.txt"
awk '{ n++; p += $3; q += $5; c += $10; if ($10 > m) m = $10 } END { printf "(b) mean pairs/s %.1f / %.1f, CreateAccessPoint req/vol mean %.2f, max %.2f\n", p / n, q / n, c / n, m }' "$out/bucket.txt"
