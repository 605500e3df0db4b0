#!/usr/bin/env bash
# Runs internal/sim's TestSchedules in PROCS processes side by side:
# the simulator runs on one P per process (its determinism), so a machine's
# cores are used by sharding the seeds.
#
#   hack/sim.sh SEEDS FIRST PROCS [DURATION]
#
# Shard i runs SEEDS/PROCS seeds from FIRST + i*SEEDS/PROCS (for DURATION
# if not 0). The exit status is 1 if any shard failed.
set -euo pipefail
seeds=${1:?seeds} first=${2:?first} procs=${3:?procs} duration=${4:-0}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"${GO:-go}" test -c -o "$dir/sim.test" ./internal/sim
cd internal/sim
per=$(( (seeds + procs - 1) / procs ))
pids=()
for ((i = 0; i < procs; i++)); do
  "$dir/sim.test" -test.run '^TestSchedules$' -test.v -test.count=1 -test.timeout=0 \
    -sim.first=$((first + i * per)) -sim.seeds="$per" -sim.duration="$duration" ${SIM_ARGS:-} &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
