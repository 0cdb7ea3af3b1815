#!/usr/bin/env bash
# MirrorMaker 2 (dedicated mode) from Maven Central jars: turnlog's topics copied from
# region A's cluster to region B's, active/passive, for machines without Docker.
#
#   mirror.sh fetch               download the pinned jars once (Maven), nothing afterwards
#   mirror.sh start|stop|status   one MirrorMaker process mirroring A -> B
#   mirror.sh kill                SIGKILL it (no shutdown)
#   mirror.sh logs [N]            the last N lines of its log
#   mirror.sh config              print the mm2.properties a start would use
#
# What it mirrors and how (docs/operations/regions.md says why and what each costs):
#   - <prefix>pauses, answers, consumptions, resumed, rejections, under their own names
#     (IdentityReplicationPolicy): a turnlog deployment in B reads them as its own topics.
#     Nothing else -- B's control topic (<prefix>region, `turnlog region promote`) is B's alone.
#   - A's records read read_committed (A.consumer.isolation.level): an aborted transaction's
#     outputs -- a fenced zombie's resume -- never reach B; B written with exactly-once source
#     support (B.exactly.once.source.support, KIP-618), so a restart of MirrorMaker neither
#     loses nor doubles a record in B.
#   - the worker group's committed offsets translated into B (checkpoints, group offsets
#     synced); the translation is conservative: B's workers re-read some answers A handled,
#     and refuse them from the mirrored ledger (already_consumed, or a duplicate).
#
# Environment (all optional):
#   KAFKA_LOCAL_HOME     where the jars are fetched to (default: <repo>/.kafka)
#   MIRROR_DATA          the process's config, log and pid (default: KAFKA_LOCAL_HOME/mirror)
#   MIRROR_SOURCE        region A's bootstrap servers (default 127.0.0.1:9092)
#   MIRROR_TARGET        region B's bootstrap servers (default 127.0.0.1:9192)
#   MIRROR_TOPIC_PREFIX  turnlog's topic prefix (default: TURNLOG_TOPIC_PREFIX or "turnlog.")
#   MIRROR_GROUPS        the worker groups whose offsets are synced (default:
#                        TURNLOG_APPLICATION_ID or "turnlog")
#   MIRROR_REST_PORT     the internal REST listener exactly-once needs (default 8083, on host)
#   MIRROR_SYNC_SECONDS  how often topics, groups, checkpoints and group offsets are refreshed
#                        (default 5; MirrorMaker's own defaults are 60 s to 10 min)
#   MIRROR_TXN_TIMEOUT_MS  MirrorMaker's transaction timeout on B (default 10000): how long
#                        B's workers can be held by a transaction a killed MirrorMaker left open
#   MIRROR_VERSION       override the connect-mirror version pinned in mirror/pom.xml
#   MIRROR_HEAP_OPTS     JVM heap (default -Xmx512m -Xms128m)
#   MIRROR_START_TIMEOUT seconds a start waits for the REST listener (default 60)
#   KAFKA_LOCAL_FAST     1: C1 JIT only (a faster start; for tests)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
home=${KAFKA_LOCAL_HOME:-$repo/.kafka}
data=${MIRROR_DATA:-$home/mirror}
source_servers=${MIRROR_SOURCE:-127.0.0.1:9092}
target_servers=${MIRROR_TARGET:-127.0.0.1:9192}
prefix=${MIRROR_TOPIC_PREFIX:-${TURNLOG_TOPIC_PREFIX:-turnlog.}}
groups=${MIRROR_GROUPS:-${TURNLOG_APPLICATION_ID:-turnlog}}
rest_host=${KAFKA_LOCAL_HOST:-127.0.0.1}
rest_port=${MIRROR_REST_PORT:-8083}
sync=${MIRROR_SYNC_SECONDS:-5}
version=${MIRROR_VERSION:-$(sed -n 's:.*<mirror.version>\(.*\)</mirror.version>.*:\1:p' "$here/mirror/pom.xml")}
lib="$home/mirror-$version"
heap=${MIRROR_HEAP_OPTS:--Xmx512m -Xms128m}
start_timeout=${MIRROR_START_TIMEOUT:-60}
fast=${KAFKA_LOCAL_FAST:-0}

log() { printf 'mirror: %s\n' "$*" >&2; }

fetch() {
  if [ -f "$lib/.complete" ]; then
    return 0
  fi
  mkdir -p "$home"
  command -v mvn >/dev/null || { log "mvn is not installed (needed once to fetch MirrorMaker $version)"; exit 1; }
  log "fetching MirrorMaker 2 (connect-mirror $version) from Maven Central into $lib"
  rm -rf "$lib"
  mkdir -p "$lib"
  if ! mvn -q -B -Dstyle.color=never -f "$here/mirror/pom.xml" dependency:copy-dependencies \
    -Dmirror.version="$version" -DincludeScope=runtime -DoutputDirectory="$lib" \
    >"$home/mirror-fetch.log" 2>&1; then
    cat "$home/mirror-fetch.log" >&2
    log "fetching connect-mirror $version failed"
    exit 1
  fi
  touch "$lib/.complete"
}

# A regex of Java's, matching each topic's whole name: the prefix's dots escaped.
topics_regex() {
  local quoted=${prefix//./\\.} names="" t
  # keys: a sealing worker's (TURNLOG_SEAL) keys of the resumed turns, and forget's tombstones
  # of them -- without it B could not open a sealed turn it holds.
  for t in pauses answers consumptions resumed rejections keys; do names+="${names:+, }$quoted$t"; done
  echo "$names"
}

config() {
  cat <<EOF
# Written by compose/kafka-local/mirror.sh; regenerated at each start.
clusters = A, B
A.bootstrap.servers = $source_servers
B.bootstrap.servers = $target_servers
A->B.enabled = true
B->A.enabled = false

# turnlog's topics under their own names; nothing else (B's control topic stays B's).
A->B.topics = $(topics_regex)
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
# Topic configs copied (compaction, retention); ACLs are not (no authorizer on test clusters).
sync.topic.configs.enabled = true
sync.topic.acls.enabled = false
refresh.topics.interval.seconds = $sync

# Committed transactions only, and exactly once into B (KIP-618; needs the internal REST).
A.consumer.isolation.level = read_committed
B.exactly.once.source.support = enabled
dedicated.mode.enable.internal.rest = true
# A MirrorMaker killed mid-transaction leaves its transaction open on B, and B's read_committed
# readers -- B's workers -- stop at it until it times out: bounded here (the default is 60 s).
B.producer.transaction.timeout.ms = ${MIRROR_TXN_TIMEOUT_MS:-10000}
listeners = http://$rest_host:$rest_port

# The worker group's offsets, translated into B while the group is not active there.
A->B.groups = $groups
A->B.emit.checkpoints.enabled = true
A->B.emit.checkpoints.interval.seconds = $sync
A->B.sync.group.offsets.enabled = true
A->B.sync.group.offsets.interval.seconds = $sync
refresh.groups.interval.seconds = $sync
A->B.emit.heartbeats.enabled = true
A->B.emit.heartbeats.interval.seconds = 1

# Single-node clusters: every internal topic with one replica.
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
tasks.max = 1
# Its plugins are the classpath's, all with ServiceLoader manifests: no scan at start.
plugin.discovery = service_load
EOF
}

log_config() {
  cat <<EOF
status = warn
shutdownHook = disable
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
EOF
}

alive() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1) || return 0
  [ "$state" != Z ]
}

is_running() { [ -f "$data/mirror.pid" ] && alive "$(cat "$data/mirror.pid")"; }

port_open() { (exec 3<>"/dev/tcp/$rest_host/$1") 2>/dev/null; }

start() {
  fetch
  if is_running; then
    log "already running (pid $(cat "$data/mirror.pid"))"
    return 0
  fi
  if port_open "$rest_port"; then
    log "port $rest_port on $rest_host is taken by another process; set MIRROR_REST_PORT"
    exit 1
  fi
  mkdir -p "$data"
  config >"$data/mm2.properties"
  log_config >"$data/log4j2.properties"
  local java=java opts=""
  [ -n "${JAVA_HOME:-}" ] && java="$JAVA_HOME/bin/java"
  [ "$fast" = 1 ] && opts="-XX:TieredStopAtLevel=1"
  echo "=== mirror: starting A=$source_servers -> B=$target_servers at $(date -u +%FT%TZ)" >>"$data/mirror.log"
  # shellcheck disable=SC2086
  nohup "$java" $heap -XX:+UseG1GC $opts -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$data/log4j2.properties" \
    -cp "$lib/*" org.apache.kafka.connect.mirror.MirrorMaker "$data/mm2.properties" \
    >>"$data/mirror.log" 2>&1 &
  echo $! >"$data/mirror.pid"
  local deadline=$((SECONDS + start_timeout))
  until port_open "$rest_port"; do
    if ! is_running; then
      log "MirrorMaker exited during start; last lines of $data/mirror.log:"
      tail -n 40 "$data/mirror.log" >&2 || true
      exit 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      log "MirrorMaker did not listen on $rest_host:$rest_port within ${start_timeout}s"
      tail -n 40 "$data/mirror.log" >&2 || true
      exit 1
    fi
    sleep 0.3
  done
  log "running (pid $(cat "$data/mirror.pid")): A=$source_servers -> B=$target_servers, topics $(topics_regex)"
}

stop() {
  if ! is_running; then
    rm -f "$data/mirror.pid"
    log "not running"
    return 0
  fi
  local pid deadline=$((SECONDS + 30))
  pid=$(cat "$data/mirror.pid")
  kill "$pid" 2>/dev/null || true
  while alive "$pid"; do
    if [ $SECONDS -ge $deadline ]; then
      log "pid $pid ignored SIGTERM for 30s; killing it"
      kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  rm -f "$data/mirror.pid"
  log "stopped"
}

kill_it() {
  if ! is_running; then
    rm -f "$data/mirror.pid"
    log "not running"
    return 0
  fi
  local pid
  pid=$(cat "$data/mirror.pid")
  kill -9 "$pid" 2>/dev/null || true
  while alive "$pid"; do sleep 0.05; done
  rm -f "$data/mirror.pid"
  log "killed (pid $pid)"
}

case ${1:-} in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  kill) kill_it ;;
  status)
    if is_running; then
      echo "running: pid $(cat "$data/mirror.pid"), A=$source_servers -> B=$target_servers, connect-mirror $version"
    else
      echo "stopped"
      exit 3
    fi
    ;;
  logs) tail -n "${2:-50}" "$data/mirror.log" ;;
  config) config ;;
  *)
    echo "usage: mirror.sh fetch|start|stop|kill|status|logs [N]|config" >&2
    exit 2
    ;;
esac
