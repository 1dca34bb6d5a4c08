#!/usr/bin/env bash
# The worker pool's loop spins while the database refuses connections: the jobs
# listener's recv() fails at once, so select! returns at once, and every turn
# logs "taking a job failed". Usage: db_outage_spin.sh LOGFILE DBNAME SECONDS
log=$1; db=$2; secs=${3:-5}
before=$(grep -ac 'taking a job failed' "$log")
psql -h 127.0.0.1 -U postgres postgres -tAc "ALTER DATABASE $db ALLOW_CONNECTIONS false" >/dev/null
psql -h 127.0.0.1 -U postgres postgres -tAc "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '$db'" >/dev/null
sleep "$secs"
psql -h 127.0.0.1 -U postgres postgres -tAc "ALTER DATABASE $db ALLOW_CONNECTIONS true" >/dev/null
after=$(grep -ac 'taking a job failed' "$log")
echo "dequeue attempts (each a WARN line) during a ${secs} s outage: $((after-before)) (poll interval is 1 s)"
