#!/usr/bin/env bash
# Runs pkg/kube's TestStormProbe (the no-fault storm of make bench: 200
# volumes, 100 workers) for two configurations in turn, ROUNDS times, 3
# runs each time, and prints one line a run and the medians: two builds
# of this driver, or one build with both records. The machine's speed
# drifts; only configurations alternated in one sitting compare.
#
#   hack/probe-alt.sh ROUNDS RECORD:BINDIR RECORD:BINDIR
#
# RECORD is leases or file; BINDIR holds efs-csi-driver, efs-csi-stress
# and efs-emulator (make build's bin/). Example, Leases against the file
# record: hack/probe-alt.sh 4 leases:bin file:bin
set -euo pipefail
rounds=${1:?rounds} a=${2:?record:bindir} b=${3:?record:bindir}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"${GO:-go}" test -c -o "$dir/kube.test" ./pkg/kube
out="$dir/runs"
for ((i = 0; i < rounds; i++)); do
  for c in "$a" "$b"; do
    EFS_PROBE_RECORD=${c%%:*} EFS_PROBE_BIN=$(cd "${c#*:}" && pwd) EFS_PROBE_RUNS=3 \
      "$dir/kube.test" -test.count=1 -test.v -test.run '^TestStormProbe$' 2>&1 |
      sed -n "s|.*BENCH probe .* run [0-9]: \([0-9.]*\) pairs/s.*, \([0-9]*\) Lease requests.*CPU \([0-9.]*\) ms a volume.*|$c \1 \2 \3|p" | tee -a "$out"
  done
done
echo "medians: configuration, runs, pairs/s, Lease requests, CPU ms a volume"
for c in "$a" "$b"; do
  awk -v c="$c" '$1 == c { p[n] = $2; r[n] = $3; u[n] = $4; n++ }
    function med(x,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
      return n % 2 ? x[int(n / 2)] : (x[n / 2 - 1] + x[n / 2]) / 2 }
    END { printf "%s %d %.1f %.1f %.2f\n", c, n, med(p), med(r), med(u) }' "$out"
done
