#!/usr/bin/env bash
# Stop what .ci/slurm-up.sh started, by PID file, in reverse order, and remove its /etc/slurm links.
BASE=${SLURM_CI_DIR:-/tmp/unie-slurm-ci}
scancel --user="$(id -un)" 2>/dev/null || true
for d in slurmd slurmctld munged; do
  f="$BASE/run/$d.pid"
  [[ -s $f ]] || continue
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  rm -f "$f"
done
for l in slurm.conf gres.conf; do [[ -L /etc/slurm/$l ]] && rm -f "/etc/slurm/$l"; done
true
