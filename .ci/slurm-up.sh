#!/usr/bin/env bash
# Bring up a throw-away single-node Slurm on localhost for the `slurm` tests: munged, slurmctld and slurmd,
# partitions `cpu` and `gpu` (the names the slurm/ profile expects), two fake GPUs declared as GRES, no
# accounting database.  Root and Debian/Ubuntu packages (installed with apt-get when missing).
# State, logs and PID files live in $SLURM_CI_DIR (default /tmp/unie-slurm-ci); .ci/slurm-down.sh stops
# everything by PID.  Each trap it works around is commented where it is met; what the slurm/ profile does
# about the cluster's side (no accounting database: status from squeue) is in docs/paper-profile.md.
set -euo pipefail
BASE=${SLURM_CI_DIR:-/tmp/unie-slurm-ci}
export DEBIAN_FRONTEND=noninteractive
if [[ $(id -u) != 0 ]]; then echo "slurm-up: needs root (daemons, /etc/slurm, mknod)" >&2; exit 2; fi
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/sbatch; do
  if [[ ! -x $b ]]; then
    command -v apt-get >/dev/null || { echo "slurm-up: $b missing and no apt-get" >&2; exit 2; }
    apt-get update -qq && apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
    break
  fi
done
# A cluster left by an earlier run (killed before .ci/slurm-down.sh ran, or the same machine reused by the
# next CI run) would be recovered with its jobs: a job recorded as running keeps the node `mix`, and its old
# records sit beside this run's in `squeue --states=all`.  Stop its daemons by their PID files and start from
# empty state.
if [[ -L /etc/slurm/slurm.conf ]]; then
  old=$(dirname "$(dirname "$(readlink /etc/slurm/slurm.conf)")")
  SLURM_CI_DIR=$old "$(dirname "$0")/slurm-down.sh"
fi
SLURM_CI_DIR=$BASE "$(dirname "$0")/slurm-down.sh"
rm -rf "$BASE"/{state,spool,run,log}
mkdir -p "$BASE"/{etc,state,spool,run,log,dev}

# --- munge (unix socket only) --------------------------------------------------------------------
mkdir -p /run/munge && chown munge:munge /run/munge
[[ -s /etc/munge/munge.key ]] || runuser -u munge -- mungekey --create
if ! munge -n >/dev/null 2>&1; then # reuse a running munged, else start one (and stop it in -down)
  runuser -u munge -- /usr/sbin/munged
  cp /run/munge/munged.pid "$BASE/run/munged.pid"
fi

# --- slurm.conf: the node line from `slurmd -C`, bound to 127.0.0.1 --------------------------------
read -r _ rest < <(/usr/sbin/slurmd -C | head -1) # "NodeName=host CPUs=2 ... RealMemory=N"
mem=$(grep -o 'RealMemory=[0-9]*' <<<"$rest" | cut -d= -f2)
rest=${rest/RealMemory=$mem/RealMemory=$((mem * 8 / 10))}
for i in 0 1; do # fake GPUs: character devices (slurmd rejects regular files)
  [[ -c "$BASE/dev/nvidia$i" ]] || mknod "$BASE/dev/nvidia$i" c 195 "$i"
done
cat >"$BASE/etc/slurm.conf" <<CONF
ClusterName=unieci
SlurmctldHost=localhost(127.0.0.1)
CommunicationParameters=NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# finished jobs stay in `squeue --states=all` for an hour: the profile's status command and the test read it
MinJobAge=3600
KillWait=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=$(hostname) $rest Gres=gpu:2 State=UNKNOWN
PartitionName=cpu Nodes=localhost MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=localhost MaxTime=INFINITE State=UP
CONF
cat >"$BASE/etc/gres.conf" <<CONF
AutoDetect=off
NodeName=localhost Name=gpu File=$BASE/dev/nvidia[0-1]
CONF
# The jobstep plugin strips SLURM_CONF before its inner `srun`: the config must sit at the default path.
mkdir -p /etc/slurm
for f in slurm.conf gres.conf; do
  if [[ -e /etc/slurm/$f && ! -L /etc/slurm/$f ]]; then echo "slurm-up: /etc/slurm/$f exists (a real Slurm?)" >&2; exit 2; fi
  ln -sf "$BASE/etc/$f" "/etc/slurm/$f"
done

# --- slurmctld + slurmd ------------------------------------------------------------------------------
/usr/sbin/slurmctld -c # -c: no state from an earlier run, even if a file was left
/usr/sbin/slurmd -N localhost
for _ in $(seq 60); do
  [[ "$(sinfo -h -n localhost -p cpu -o %t 2>/dev/null)" == idle ]] && break
  sleep 0.5
done
sinfo
