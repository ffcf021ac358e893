#!/usr/bin/env bash
# mk/lane.sh NAME COMMAND...: run one lane of `make test`, print its time and
# keep it in .lanes/times for the summary at the end.
set -u
name=$1; shift
mkdir -p .lanes
start=$(date +%s)
"$@"
rc=$?
seconds=$(( $(date +%s) - start ))
status=$([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")
printf '%-18s %4d min %02d s  %s\n' "$name" $((seconds / 60)) $((seconds % 60)) "$status" | tee -a .lanes/times
exit "$rc"
