#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the tests marked `slurm` (CI runs it before `make test`).
# Installs Debian's slurm-wlm and munge when missing (needs root and apt-get), writes a one-node slurm.conf
# (partition `cpu`, proctrack/linuxproc, task/none, select/cons_tres; no cgroups, no systemd: the daemons
# are started directly), starts munged, slurmctld and slurmd, and waits until `sinfo` shows the node idle.
# Idempotent: a second call finds the cluster up and only reports it. No accounting database: supportbench's
# Slurm executor never needs `sacct` (it awaits result files and asks `squeue` whether a task still lives).
set -euo pipefail
STATE=${SUPPORTBENCH_SLURM_DIR:-/tmp/supportbench-slurm}
CONF_DIR=/etc/slurm

say() { echo "slurm-single-node: $*"; }

if sinfo -h -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; then
  say "cluster already up: $(sinfo -h -o '%P %D %T' | head -1)"; exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "slurmctld/munged missing and cannot install them (needs root and apt-get)" >&2; exit 1
  fi
  say "installing slurm-wlm and munge"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
fi
mkdir -p "$STATE"/spool/ctld "$STATE"/spool/d "$STATE"/log "$STATE"/run "$CONF_DIR"

# munge: a key, then the daemon (as the munge user when it exists)
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
if id munge >/dev/null 2>&1; then
  chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
fi
chmod 400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
  if id munge >/dev/null 2>&1; then runuser -u munge -- munged; else munged --force; fi
fi

HOST=$(hostname -s)
CPUS=$(nproc)
MEM=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
cat > "$CONF_DIR/slurm.conf" <<CONF
ClusterName=supportbench
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MpiDefault=none
KillWait=5
InactiveLimit=0
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=cpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF

pgrep -x slurmctld >/dev/null || slurmctld -c
pgrep -x slurmd >/dev/null || slurmd -c
for _ in $(seq 1 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; then
    say "up: $(sinfo -h -o '%P %D %T %C' | head -1)"
    say "stop with: kill \$(cat $STATE/run/slurmd.pid) \$(cat $STATE/run/slurmctld.pid); pkill -x munged"
    exit 0
  fi
  sleep 1
done
say "node did not become idle within 60 s; logs in $STATE/log" >&2
tail -n 20 "$STATE"/log/*.log >&2 || true
exit 1
