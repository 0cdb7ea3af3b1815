#!/usr/bin/env bash
# Run a command with a Kafka broker available: the one in TURNLOG_BOOTSTRAP_SERVERS if set,
# else the local broker of compose/kafka-local (started here, and stopped afterwards only if it
# was started here). The command's exit status is this script's; on failure the broker's last
# log lines are printed, since "the broker was unwell" is the first question a red run raises.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kafka="$here/compose/kafka-local/kafka.sh"
started=0
if [ -z "${TURNLOG_BOOTSTRAP_SERVERS:-}" ]; then
  if ! "$kafka" status >/dev/null 2>&1; then
    "$kafka" start || exit 1
    started=1
  fi
  export TURNLOG_BOOTSTRAP_SERVERS="${KAFKA_LOCAL_HOST:-127.0.0.1}:${KAFKA_LOCAL_PORT:-9092}"
  export TURNLOG_BROKER_LOG="${KAFKA_LOCAL_HOME:-$here/.kafka}/single/server.log"
fi
"$@"
rc=$?
if [ $rc -ne 0 ] && [ -n "${TURNLOG_BROKER_LOG:-}" ] && [ -f "$TURNLOG_BROKER_LOG" ]; then
  echo "---- last lines of the broker log ($TURNLOG_BROKER_LOG) ----" >&2
  tail -n 30 "$TURNLOG_BROKER_LOG" >&2
fi
if [ $started -eq 1 ]; then
  "$kafka" stop || true
fi
exit $rc
