#!/usr/bin/env bash
# A Confluent-compatible schema registry (Apicurio Registry, ccompat API) from Maven Central,
# for machines without Docker: the registry wire's tests and a local try of TURNLOG_WIRE=registry.
#
#   registry.sh build      fetch the jars and run the Quarkus build once (pom.xml beside this)
#   registry.sh start      build if needed, start one registry (in-memory storage: every start
#                          is empty), wait until it answers; prints its URL
#   registry.sh stop|status
#   registry.sh url        the URL to give TURNLOG_SCHEMA_REGISTRY_URL
#   registry.sh logs [N]   the last N lines of its log
#
# Environment (all optional):
#   REGISTRY_LOCAL_HOME   where the build and an instance's pid and log live (default:
#                         <repo>/.registry); another directory runs another instance
#   REGISTRY_LOCAL_HOST   listen host (default 127.0.0.1)
#   REGISTRY_LOCAL_PORT   HTTP port (default 8081)
#   REGISTRY_START_TIMEOUT  seconds a start waits for it to answer (default 120)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
home=${REGISTRY_LOCAL_HOME:-$repo/.registry}
host=${REGISTRY_LOCAL_HOST:-127.0.0.1}
port=${REGISTRY_LOCAL_PORT:-8081}
start_timeout=${REGISTRY_START_TIMEOUT:-120}
project="$home/project"
pidfile="$home/registry-$port.pid"
logfile="$home/registry-$port.log"
url="http://$host:$port/apis/ccompat/v7"

log() { printf 'registry-local: %s\n' "$*" >&2; }

runner() { ls "$project"/target/*-runner.jar 2>/dev/null | head -1; }

build() {
  if [ -f "$project/.complete" ] && [ -n "$(runner)" ] && cmp -s "$here/pom.xml" "$project/pom.xml"; then
    return 0
  fi
  command -v mvn >/dev/null || { log "mvn is not installed (needed once to build the registry)"; exit 1; }
  command -v java >/dev/null || { log "java is not installed (Java 17+ runs the registry)"; exit 1; }
  log "building Apicurio Registry from Maven Central into $project (once; about a minute)"
  rm -rf "$project"
  mkdir -p "$project"
  cp -r "$here/pom.xml" "$here/src" "$project/"
  if ! mvn -q -B -Dstyle.color=never -s "$here/settings.xml" -f "$project/pom.xml" package \
    -DskipTests -Dmaven.test.skip=true -Dcheckstyle.skip -Denforcer.skip -Dlicense.skip \
    -Djacoco.skip >"$home/build.log" 2>&1; then
    tail -40 "$home/build.log" >&2
    log "building the registry failed (full log: $home/build.log)"
    exit 1
  fi
  touch "$project/.complete"
}

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

answers() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/subjects" 2>/dev/null | grep -q '^200$'; }

start() {
  if running && answers; then
    echo "$url"
    return 0
  fi
  build
  mkdir -p "$home"
  log "starting the registry on $host:$port (log: $logfile)"
  nohup java -Xmx512m -XX:TieredStopAtLevel=1 -Dquarkus.http.host="$host" \
    -Dquarkus.http.port="$port" -Dquarkus.log.level=WARN -jar "$(runner)" >"$logfile" 2>&1 &
  echo $! >"$pidfile"
  local waited=0
  until answers; do
    if ! running; then
      tail -20 "$logfile" >&2
      log "the registry exited during its start"
      exit 1
    fi
    if [ "$waited" -ge "$start_timeout" ]; then
      log "the registry did not answer within ${start_timeout}s"
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  echo "$url"
}

stop() {
  if running; then
    local pid
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 1 30); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  status) if running && answers; then echo "running: $url"; else echo "stopped"; exit 1; fi ;;
  url) echo "$url" ;;
  logs) tail -n "${2:-50}" "$logfile" ;;
  *) echo "usage: $0 build|start|stop|status|url|logs [N]" >&2; exit 2 ;;
esac
