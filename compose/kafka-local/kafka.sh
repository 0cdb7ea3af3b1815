#!/usr/bin/env bash
# Apache Kafka (KRaft) from Maven Central jars, for machines without Docker.
#
#   kafka.sh fetch                 download the pinned jars once (Maven), nothing afterwards
#   kafka.sh start|stop|status     one combined broker+controller node
#   kafka.sh start3|stop3|status3  three nodes on one machine (RF 3, min.insync.replicas 2)
#   kafka.sh logs [N]              the last N lines of the single node's log
#
# Environment (all optional):
#   KAFKA_LOCAL_HOME   where jars, data, logs and pid files live (default: <repo>/.kafka)
#   KAFKA_LOCAL_HOST   listen/advertise host (default 127.0.0.1)
#   KAFKA_LOCAL_PORT   client port of the single node (default 9092; controller = port+1)
#   KAFKA_LOCAL_PORT3  first client port of the 3-node cluster (default 19092; node i uses +2(i-1))
#   KAFKA_VERSION      override the version pinned in pom.xml
#   KAFKA_HEAP_OPTS    JVM heap (default -Xmx1G -Xms512m)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
home=${KAFKA_LOCAL_HOME:-$repo/.kafka}
host=${KAFKA_LOCAL_HOST:-127.0.0.1}
port=${KAFKA_LOCAL_PORT:-9092}
port3=${KAFKA_LOCAL_PORT3:-19092}
version=${KAFKA_VERSION:-$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")}
lib="$home/lib-$version"
heap=${KAFKA_HEAP_OPTS:--Xmx1G -Xms512m}
start_timeout=${KAFKA_START_TIMEOUT:-90}

log() { printf 'kafka-local: %s\n' "$*" >&2; }

fetch() {
  if [ -f "$lib/.complete" ]; then
    return 0
  fi
  command -v mvn >/dev/null || { log "mvn is not installed (needed once to fetch Kafka $version)"; exit 1; }
  log "fetching Apache Kafka $version and its logging jars from Maven Central into $lib"
  rm -rf "$lib"
  mkdir -p "$lib"
  if ! mvn -q -B -Dstyle.color=never -f "$here/pom.xml" dependency:copy-dependencies \
    -Dkafka.version="$version" -DincludeScope=runtime -DoutputDirectory="$lib" \
    >"$home/fetch.log" 2>&1; then
    cat "$home/fetch.log" >&2
    log "fetching Kafka $version failed"
    exit 1
  fi
  touch "$lib/.complete"
}

java_cmd() {
  local java=java
  [ -n "${JAVA_HOME:-}" ] && java="$JAVA_HOME/bin/java"
  echo "$java"
}

# node_config NAME NODE_ID CLIENT_PORT CONTROLLER_PORT VOTERS RF MIN_ISR
node_config() {
  local name=$1 id=$2 cport=$3 kport=$4 voters=$5 rf=$6 isr=$7
  local dir="$home/$name"
  mkdir -p "$dir/data"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://$host:$cport,CONTROLLER://$host:$kport
advertised.listeners=PLAINTEXT://$host:$cport
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
log.cleaner.backoff.ms=1000
EOF
  cat >"$dir/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
}

is_running() { # DIR
  local pidfile="$1/kafka.pid"
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

port_open() { # PORT
  (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null
}

start_node() { # NAME CLIENT_PORT CLUSTER_ID
  local name=$1 cport=$2 cluster=$3 dir="$home/$1"
  local cp="$lib/*" java
  java=$(java_cmd)
  if is_running "$dir"; then
    log "$name already running (pid $(cat "$dir/kafka.pid")) on $host:$cport"
    return 0
  fi
  if port_open "$cport"; then
    log "port $cport on $host is taken by another process; set KAFKA_LOCAL_PORT or stop it"
    exit 1
  fi
  if [ ! -f "$dir/data/meta.properties" ]; then
    "$java" -cp "$cp" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
      kafka.tools.StorageTool format -c "$dir/server.properties" -t "$cluster" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; exit 1; }
  fi
  # shellcheck disable=SC2086
  nohup "$java" $heap -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" >"$dir/server.log" 2>&1 &
  echo $! >"$dir/kafka.pid"
}

wait_ready() { # NAME CLIENT_PORT
  local name=$1 cport=$2 dir="$home/$1" deadline=$((SECONDS + start_timeout))
  until port_open "$cport"; do
    if ! is_running "$dir"; then
      log "$name exited during start; last lines of $dir/server.log:"
      tail -n 40 "$dir/server.log" >&2 || true
      exit 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      log "$name did not accept connections on $host:$cport within ${start_timeout}s; last log lines:"
      tail -n 40 "$dir/server.log" >&2 || true
      exit 1
    fi
    sleep 0.3
  done
  log "$name ready on $host:$cport (pid $(cat "$dir/kafka.pid"))"
}

stop_node() { # NAME
  local dir="$home/$1"
  if ! is_running "$dir"; then
    if [ -f "$dir/kafka.pid" ]; then log "$1 stopped"; else log "$1 not running"; fi
    rm -f "$dir/kafka.pid"
    return 0
  fi
  local pid deadline=$((SECONDS + 60))
  pid=$(cat "$dir/kafka.pid")
  kill "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then
      log "$1 (pid $pid) ignored SIGTERM for 60s; killing it"
      kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  rm -f "$dir/kafka.pid"
  log "$1 stopped"
}

cluster_id() { # NAME
  local f="$home/$1.cluster-id"
  if [ ! -f "$f" ]; then
    "$(java_cmd)" -cp "$lib/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1 >"$f"
  fi
  cat "$f"
}

single() { # start|stop|status
  local name=single kport=$((port + 1))
  case $1 in
    start)
      fetch
      node_config $name 1 "$port" "$kport" "1@$host:$kport" 1 1
      start_node $name "$port" "$(cluster_id $name)"
      wait_ready $name "$port"
      ;;
    stop) stop_node $name ;;
    status)
      if is_running "$home/$name"; then
        echo "running: pid $(cat "$home/$name/kafka.pid"), bootstrap $host:$port, Kafka $version, data $home/$name/data"
      else
        echo "stopped (bootstrap would be $host:$port)"
        return 3
      fi
      ;;
  esac
}

triple() { # start|stop|status
  local voters="" i
  for i in 1 2 3; do
    voters+="${voters:+,}$i@$host:$((port3 + 2 * (i - 1) + 1))"
  done
  case $1 in
    start)
      fetch
      local cid
      cid=$(cluster_id cluster3)
      for i in 1 2 3; do
        node_config "cluster3/node-$i" "$i" "$((port3 + 2 * (i - 1)))" "$((port3 + 2 * (i - 1) + 1))" "$voters" 3 2
        start_node "cluster3/node-$i" "$((port3 + 2 * (i - 1)))" "$cid"
      done
      for i in 1 2 3; do wait_ready "cluster3/node-$i" "$((port3 + 2 * (i - 1)))"; done
      echo "bootstrap: $host:$port3,$host:$((port3 + 2)),$host:$((port3 + 4))"
      ;;
    stop)
      # Signal all three first: a node stopping after the others lost the controller quorum
      # would wait for it in its controlled shutdown.
      for i in 1 2 3; do
        is_running "$home/cluster3/node-$i" && kill "$(cat "$home/cluster3/node-$i/kafka.pid")" || true
      done
      for i in 1 2 3; do stop_node "cluster3/node-$i"; done
      ;;
    status)
      local rc=0
      for i in 1 2 3; do
        if is_running "$home/cluster3/node-$i"; then
          echo "node-$i running: $host:$((port3 + 2 * (i - 1)))"
        else
          echo "node-$i stopped"; rc=3
        fi
      done
      return $rc
      ;;
  esac
}

case ${1:-} in
  fetch) fetch ;;
  start | stop | status) single "$1" ;;
  start3) triple start ;;
  stop3) triple stop ;;
  status3) triple status ;;
  logs) tail -n "${2:-60}" "$home/single/server.log" ;;
  *)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
