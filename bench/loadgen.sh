#!/usr/bin/env bash
# One load-harness run against a fresh devstack, with the broker floor in
# the same run and the devstack's CPU sampled from /proc every 0.25 s.
#
#   bench/loadgen.sh DEVSTACK LOADGEN CONVERSATIONS MESSAGES OUTDIR
#
# DEVSTACK and LOADGEN are binaries (go build -o … ./cmd/devstack,
# ./cmd/loadgen), so that two builds (before and after a change) can be
# compared in one session. Writes OUTDIR/loadgen-N.txt (the harness's
# summary), result-N.json, cpu-N.txt ("unix-time utime+stime-ticks" of the
# devstack), loadgen-cpu-N.txt (the same of the harness) and metrics-N.txt
# (the stack's /metrics after the run).
# LG_EXTRA, if set, is added to loadgen's flags (e.g. LG_EXTRA="-mode
# pipeline"). PROFILE_SECONDS, if set, takes a CPU profile of the devstack
# for that many seconds, PROFILE_AFTER seconds (default 0) after the
# harness's start (the floor runs first), into OUTDIR/cpu-N.pprof (read
# it with go tool pprof DEVSTACK OUTDIR/cpu-N.pprof); PROFILE_KIND=allocs
# takes the allocations of that window instead (OUTDIR/allocs-N.pprof).
# Fixed loopback ports (29180, 29181, 29192, 29117, 29190 for pprof),
# below Linux's ephemeral range (32768–60999), where a test's outgoing
# connection could hold one: one run at a time.
set -u
devstack=$1 loadgen=$2 n=$3 msgs=$4 out=$5
mkdir -p "$out"
data=$(mktemp -d)
export TURNPIKE_AUTH_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export TURNPIKE_ECHO_DELAY=0 TURNPIKE_RATE_PER_SECOND=-1 TURNPIKE_LOG_LEVEL=error
export TURNPIKE_MAX_QUEUED_PER_CONVERSATION=-1 TURNPIKE_MAX_QUEUED_PER_TENANT=-1
export TURNPIKE_INGEST_ADDR=127.0.0.1:29180 TURNPIKE_PUSHGW_ADDR=127.0.0.1:29181
export TURNPIKE_KAFKA_ADDR=127.0.0.1:29192 TURNPIKE_MONGO_ADDR=127.0.0.1:29117 TURNPIKE_DATA_DIR=$data
if [ -n "${PROFILE_SECONDS:-}" ]; then export TURNPIKE_PPROF_ADDR=127.0.0.1:29190; fi
"$devstack" > "$out/devstack-$n.log" 2>&1 &
pid=$!
# Ready once both the ingest API and the push gateway say so.
for _ in $(seq 100); do
  curl -sf http://127.0.0.1:29180/readyz > /dev/null && curl -sf http://127.0.0.1:29181/readyz > /dev/null && break
  sleep 0.2
done
while kill -0 $pid 2> /dev/null; do
  echo "$(date +%s.%N) $(awk '{print $14+$15}' /proc/$pid/stat 2> /dev/null)"
  sleep 0.25
done > "$out/cpu-$n.txt" &
if [ -n "${PROFILE_SECONDS:-}" ]; then
  kind=${PROFILE_KIND:-cpu}
  path=profile
  if [ "$kind" = allocs ]; then path=allocs; fi
  (sleep "${PROFILE_AFTER:-0}" && curl -sf -o "$out/$kind-$n.pprof" \
    "http://127.0.0.1:29190/debug/pprof/$path?seconds=$PROFILE_SECONDS") &
fi
"$loadgen" -ingest http://127.0.0.1:29180 -stream ws://127.0.0.1:29181/v1/stream \
  -kafka-brokers 127.0.0.1:29192 -users 50 -conversations "$n" -messages "$msgs" \
  -out "$out/result-$n.json" ${LG_EXTRA:-} > "$out/loadgen-$n.txt" 2>&1 &
lg=$!
# The harness's own CPU, apart from the stack's (same format).
while kill -0 $lg 2> /dev/null; do
  echo "$(date +%s.%N) $(awk '{print $14+$15}' /proc/$lg/stat 2> /dev/null)"
  sleep 0.25
done > "$out/loadgen-cpu-$n.txt" &
wait $lg
status=$?
# The stack's metrics after the run (one registry, at the ingest port):
# the turn-stage histograms (README.md "Observability").
curl -sf http://127.0.0.1:29180/metrics > "$out/metrics-$n.txt"
kill $pid
wait $pid 2> /dev/null
rm -rf "$data"
exit $status
