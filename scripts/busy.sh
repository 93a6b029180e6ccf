#!/usr/bin/env bash
# Run a command beside CPU-bound burner processes, as a busy machine has them:
#
#   scripts/busy.sh [N] COMMAND [ARGS...]     N burners (8 by default), then COMMAND
#
# e.g. `scripts/busy.sh 8 ./scripts/test.sh`: the suite must stay green beside eight
# burners (CONTRIBUTING.md, "A busy machine"). The burners run at the command's own
# priority, start before it and end with it, however it ends; the exit status is the
# command's. The last line gives the wall time and the load average at the end.
set -euo pipefail
count=8
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  count=$1
  shift
fi
if [ $# -eq 0 ]; then
  echo "usage: scripts/busy.sh [N] COMMAND [ARGS...]" >&2
  exit 2
fi
burners=()
trap 'kill "${burners[@]}" 2>/dev/null || true' EXIT
for _ in $(seq "$count"); do
  (while :; do :; done) &
  burners+=($!)
done
started=$SECONDS
status=0
"$@" || status=$?
echo "busy.sh: '$*' beside $count burners: exit $status after $((SECONDS - started)) s;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
exit "$status"
