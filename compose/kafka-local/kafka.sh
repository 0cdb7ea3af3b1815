#!/usr/bin/env bash
# Apache Kafka (KRaft) from Maven Central jars, for machines without Docker.
#
#   kafka.sh fetch                 download the pinned jars once (Maven), nothing afterwards
#   kafka.sh start|stop|status     one combined broker+controller node
#   kafka.sh kill                  SIGKILL the single node (no controlled shutdown); start again
#   kafka.sh start3|stop3|status3  three nodes on one machine (RF 3, min.insync.replicas 2)
#   kafka.sh node3 start|stop|kill ID   one node (1-3) of the three-node cluster
#   kafka.sh logs [N]              the last N lines of the single node's log
#   kafka.sh start-secure|stop-secure|status-secure   one node with a SASL_SSL client listener:
#                                  a throw-away CA and server certificate made at start (PEM,
#                                  in <data>/secure/tls), SCRAM users created when the storage
#                                  is formatted, StandardAuthorizer on (no ACL: denied), super
#                                  user "admin"; <data>/secure/admin.properties connects as it;
#                                  a mutual-TLS listener on port+2 (client-USER.crt/.key per
#                                  user in <data>/secure/tls, principal User:USER from the CN);
#                                  with KAFKA_LOCAL_OAUTH_JWKS=URL, SASL OAUTHBEARER on port+3
#                                  (Kafka's validator on that JWKS, audience
#                                  KAFKA_LOCAL_OAUTH_AUDIENCE or "kafka", issuer
#                                  KAFKA_LOCAL_OAUTH_ISSUER or the JWKS URL's parent, principal
#                                  the token's sub)
#   kafka.sh acls FILE             create the ACLs of FILE on the secured node, as admin (one
#                                  "principal operation resource-type name pattern-type" a line:
#                                  what `turnlog acls --plain` prints)
#   kafka.sh logs3 ID [N]          the last N lines of node ID's log
#
# Environment (all optional):
#   KAFKA_LOCAL_HOME   where the jars (lib-<version>) are fetched to (default: <repo>/.kafka)
#   KAFKA_LOCAL_DATA   where an instance's configs, data, logs and pid files live (default:
#                      KAFKA_LOCAL_HOME); another directory runs another instance from the same
#                      jars, e.g. a test's own disposable broker on its own ports
#   KAFKA_LOCAL_HOST   listen/advertise host (default 127.0.0.1)
#   KAFKA_LOCAL_PORT   client port of the single node (default 9092; controller = port+1)
#   KAFKA_LOCAL_PORT3  first client port of the 3-node cluster (default 19092; node i uses +2(i-1))
#   KAFKA_VERSION      override the version pinned in pom.xml
#   KAFKA_HEAP_OPTS    JVM heap (default -Xmx1G -Xms512m)
#   KAFKA_JVM_OPTS     other JVM options of the broker (default -XX:+UseG1GC)
#   KAFKA_START_TIMEOUT  seconds a start waits for the client port (default 90)
#   KAFKA_LOCAL_FAST   1: start the JVM faster (C1 JIT only, a shared class archive); for tests
#   KAFKA_LOCAL_PROPERTIES  extra server properties, "k=v k=v", appended to every node's config
#   KAFKA_LOCAL_FEATURES    feature levels set when a node's storage is first formatted,
#                      "name=level name=level" (StorageTool's --feature), e.g.
#                      "eligible.leader.replicas.version=0"; an existing data directory keeps its own
#   KAFKA_LOCAL_TXN_DEBUG   1: the transaction marker channel's loggers at DEBUG (every marker
#                      queued and answered; the markers it drops are logged at INFO anyway)
#   KAFKA_LOCAL_USERS  SCRAM-SHA-512/256 users of start-secure, "name:password ..." (admin is
#                      always made, password KAFKA_LOCAL_ADMIN_PASSWORD, default admin-secret)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
home=${KAFKA_LOCAL_HOME:-$repo/.kafka}
data=${KAFKA_LOCAL_DATA:-$home}
host=${KAFKA_LOCAL_HOST:-127.0.0.1}
port=${KAFKA_LOCAL_PORT:-9092}
port3=${KAFKA_LOCAL_PORT3:-19092}
version=${KAFKA_VERSION:-$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")}
lib="$home/lib-$version"
heap=${KAFKA_HEAP_OPTS:--Xmx1G -Xms512m}
jvm_opts=${KAFKA_JVM_OPTS:--XX:+UseG1GC}
start_timeout=${KAFKA_START_TIMEOUT:-90}
fast=${KAFKA_LOCAL_FAST:-0}
extra_properties=${KAFKA_LOCAL_PROPERTIES:-}
txn_debug=${KAFKA_LOCAL_TXN_DEBUG:-0}
feature_flags=()
for feature in ${KAFKA_LOCAL_FEATURES:-}; do feature_flags+=(--feature "$feature"); done

log() { printf 'kafka-local: %s\n' "$*" >&2; }

fetch() {
  if [ -f "$lib/.complete" ]; then
    return 0
  fi
  mkdir -p "$home"
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

# The class-data archive of KAFKA_LOCAL_FAST, one per jar set and Java installation: a JVM
# refuses an archive made by another one, and would then just start without it.
cds_archive() {
  local java
  java=$(readlink -f "$(command -v "$(java_cmd)")")
  echo "$lib/.classes-$(printf '%s %s' "$java" "$(stat -c %Y "$java")" | cksum | cut -d' ' -f1).jsa"
}

# fast_opts [DIR]: with KAFKA_LOCAL_FAST=1 a JVM starts in about half the time -- the JIT stops
# at C1 (plenty for tests) and classes come from a shared archive, which the first fast broker
# writes when it stops (stop_node moves it next to the jars).
fast_opts() {
  [ "$fast" = 1 ] || return 0
  local cds
  cds=$(cds_archive)
  if [ -f "$cds" ]; then
    echo "-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile=$cds -Xlog:cds=off"
  elif [ -n "${1:-}" ]; then
    echo "-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit=$1/classes.jsa -Xlog:cds=off"
  else
    echo "-XX:TieredStopAtLevel=1"
  fi
}

keep_cds_archive() { # DIR -- after the JVM that wrote DIR/classes.jsa has exited
  local made="$1/classes.jsa" cds
  [ -f "$made" ] || return 0
  cds=$(cds_archive)
  if [ ! -f "$cds" ]; then
    cp "$made" "$cds.$$" && mv -f "$cds.$$" "$cds"
  fi
  rm -f "$made"
}

# node_config NAME NODE_ID CLIENT_PORT CONTROLLER_PORT VOTERS RF MIN_ISR
node_config() {
  local name=$1 id=$2 cport=$3 kport=$4 voters=$5 rf=$6 isr=$7
  local dir="$data/$name"
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
  # KAFKA_LOCAL_PROPERTIES: extra k=v lines (whitespace-separated); a later key wins.
  local prop
  for prop in $extra_properties; do echo "$prop" >>"$dir/server.properties"; done
  # The transaction marker channel logs at INFO the markers it drops ("Couldn't find leader
  # endpoint for partitions ... can be skipped": KAFKA-20734, docs/guarantees.md) and its
  # retries; KAFKA_LOCAL_TXN_DEBUG=1 adds every marker queued and answered (DEBUG). Log4j's
  # own shutdown hook is off: it stopped the logging a moment into a SIGTERM, so the rest of
  # the controlled shutdown -- where those markers are dropped -- never reached server.log.
  local txn_log_level=INFO
  [ "$txn_debug" = 1 ] && txn_log_level=DEBUG
  cat >"$dir/log4j2.properties" <<EOF
status = warn
shutdownHook = disable
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
logger.txnmarker.name = kafka.coordinator.transaction.TransactionMarkerChannelManager
logger.txnmarker.level = $txn_log_level
logger.txnmarkerresponse.name = kafka.coordinator.transaction.TransactionMarkerRequestCompletionHandler
logger.txnmarkerresponse.level = $txn_log_level
EOF
}

# alive PID: the process exists and is not a zombie. An exited JVM has already released its
# ports and files; here PID 1 can take a second or more to reap it.
alive() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1) || return 0
  [ "$state" != Z ]
}

is_running() { # DIR
  local pidfile="$1/kafka.pid"
  [ -f "$pidfile" ] && alive "$(cat "$pidfile")"
}

port_open() { # PORT
  (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null
}

start_node() { # NAME CLIENT_PORT CLUSTER_ID
  local name=$1 cport=$2 cluster=$3 dir="$data/$1"
  local cp="$lib/*" java
  java=$(java_cmd)
  if is_running "$dir"; then
    log "$name already running (pid $(cat "$dir/kafka.pid")) on $host:$cport"
    return 0
  fi
  # A node killed a moment ago may still hold its port until its process is reaped: give it
  # a few seconds before calling the port someone else's.
  local freed=$((SECONDS + 15))
  while port_open "$cport" && [ $SECONDS -lt $freed ]; do sleep 0.3; done
  if port_open "$cport"; then
    log "port $cport on $host is taken by another process; set KAFKA_LOCAL_PORT or stop it"
    exit 1
  fi
  if [ ! -f "$dir/data/meta.properties" ]; then
    # shellcheck disable=SC2046
    "$java" $(fast_opts) -cp "$cp" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
      kafka.tools.StorageTool format -c "$dir/server.properties" -t "$cluster" \
      ${feature_flags[@]+"${feature_flags[@]}"} >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; exit 1; }
  fi
  # Appended, not truncated: after a restart the log still says how the previous run ended.
  echo "=== kafka-local: starting $name on $host:$cport at $(date -u +%FT%TZ)" >>"$dir/server.log"
  # shellcheck disable=SC2046,SC2086
  nohup "$java" $heap $jvm_opts $(fast_opts "$dir") -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" >>"$dir/server.log" 2>&1 &
  echo $! >"$dir/kafka.pid"
}

wait_ready() { # NAME CLIENT_PORT
  local name=$1 cport=$2 dir="$data/$1" deadline=$((SECONDS + start_timeout))
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
  local dir="$data/$1"
  if ! is_running "$dir"; then
    if [ -f "$dir/kafka.pid" ]; then log "$1 stopped"; else log "$1 not running"; fi
    rm -f "$dir/kafka.pid"
    return 0
  fi
  local pid deadline=$((SECONDS + 60))
  pid=$(cat "$dir/kafka.pid")
  kill "$pid" 2>/dev/null || true
  while alive "$pid"; do
    if [ $SECONDS -ge $deadline ]; then
      log "$1 (pid $pid) ignored SIGTERM for 60s; killing it"
      kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  rm -f "$dir/kafka.pid"
  keep_cds_archive "$dir"
  log "$1 stopped"
}

kill_node() { # NAME -- SIGKILL: no controlled shutdown, the next start recovers the logs
  local dir="$data/$1" pid
  if ! is_running "$dir"; then
    rm -f "$dir/kafka.pid"
    log "$1 not running"
    return 0
  fi
  pid=$(cat "$dir/kafka.pid")
  kill -9 "$pid" 2>/dev/null || true
  while alive "$pid"; do sleep 0.05; done
  rm -f "$dir/kafka.pid" "$dir/classes.jsa" # a killed JVM leaves no usable archive
  log "$1 killed (pid $pid)"
}

cluster_id() { # NAME
  mkdir -p "$data"
  local f="$data/$1.cluster-id"
  if [ ! -f "$f" ]; then
    # What `StorageTool random-uuid` prints (16 random bytes, URL-safe base64 without padding,
    # never starting with '-'), without starting a JVM for it.
    local id=-
    while [ "${id:0:1}" = - ]; do
      id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
    done
    echo "$id" >"$f"
  fi
  cat "$f"
}

single() { # start|stop|kill|status
  local name=single kport=$((port + 1))
  case $1 in
    start)
      fetch
      node_config $name 1 "$port" "$kport" "1@$host:$kport" 1 1
      start_node $name "$port" "$(cluster_id $name)"
      wait_ready $name "$port"
      ;;
    stop) stop_node $name ;;
    kill) kill_node $name ;;
    status)
      if is_running "$data/$name"; then
        echo "running: pid $(cat "$data/$name/kafka.pid"), bootstrap $host:$port, Kafka $version, data $data/$name/data"
      else
        echo "stopped (bootstrap would be $host:$port)"
        return 3
      fi
      ;;
  esac
}

node3_port() { echo $((port3 + 2 * ($1 - 1))); } # ID -> client port (controller = +1)

node3_voters() {
  local voters="" i
  for i in 1 2 3; do voters+="${voters:+,}$i@$host:$(($(node3_port $i) + 1))"; done
  echo "$voters"
}

node3() { # start|stop|kill ID -- one node of the cluster, e.g. to take a partition leader away
  local id=${2:-}
  case $id in 1 | 2 | 3) ;; *) log "node3 needs a node id 1, 2 or 3"; exit 2 ;; esac
  local name="cluster3/node-$id" cport
  cport=$(node3_port "$id")
  case $1 in
    start)
      fetch
      node_config "$name" "$id" "$cport" "$((cport + 1))" "$(node3_voters)" 3 2
      start_node "$name" "$cport" "$(cluster_id cluster3)"
      wait_ready "$name" "$cport"
      ;;
    stop) stop_node "$name" ;;
    kill) kill_node "$name" ;;
    *) log "node3 start|stop|kill ID"; exit 2 ;;
  esac
}

triple() { # start|stop|status
  local i
  case $1 in
    start)
      fetch
      local cid voters
      cid=$(cluster_id cluster3)
      voters=$(node3_voters)
      for i in 1 2 3; do
        node_config "cluster3/node-$i" "$i" "$(node3_port $i)" "$(($(node3_port $i) + 1))" "$voters" 3 2
        start_node "cluster3/node-$i" "$(node3_port $i)" "$cid"
      done
      for i in 1 2 3; do wait_ready "cluster3/node-$i" "$(node3_port $i)"; done
      echo "bootstrap: $host:$(node3_port 1),$host:$(node3_port 2),$host:$(node3_port 3)"
      ;;
    stop)
      # Signal all three first: a node stopping after the others lost the controller quorum
      # would wait for it in its controlled shutdown.
      for i in 1 2 3; do
        is_running "$data/cluster3/node-$i" && kill "$(cat "$data/cluster3/node-$i/kafka.pid")" || true
      done
      for i in 1 2 3; do stop_node "cluster3/node-$i"; done
      ;;
    status)
      local rc=0
      for i in 1 2 3; do
        if is_running "$data/cluster3/node-$i"; then
          echo "node-$i running: $host:$(node3_port $i)"
        else
          echo "node-$i stopped"; rc=3
        fi
      done
      return $rc
      ;;
  esac
}

# make_tls DIR: a throw-away CA, and a server certificate for $host/localhost signed by it
make_tls() {
  local dir=$1
  [ -f "$dir/server-keystore.pem" ] && return 0
  mkdir -p "$dir"
  command -v openssl >/dev/null || { log "openssl is needed for start-secure"; exit 1; }
  (
    cd "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
      -subj "/CN=kafka-local test CA" 2>/dev/null
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out server.key 2>/dev/null
    openssl req -new -key server.key -out server.csr -subj "/CN=$host" 2>/dev/null
    case $host in
      127.0.0.1 | localhost) echo "subjectAltName=IP:127.0.0.1,DNS:localhost" ;;
      *[!0-9.]*) echo "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:$host" ;;
      *) echo "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:$host" ;;
    esac >san.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.crt \
      -days 2 -extfile san.ext 2>/dev/null
    # Kafka's PEM keystore: the PKCS#8 key, then the certificate chain, in one file.
    cat server.key server.crt ca.pem >server-keystore.pem
    rm -f server.csr san.ext
  )
}

# client_certs DIR USER...: a client certificate (CN=USER, signed by DIR's CA) and its key per
# user, for the mutual-TLS listener (its principal is the CN: User:USER, as with SCRAM)
client_certs() {
  local dir=$1 user
  shift
  for user in "$@"; do
    [ -f "$dir/client-$user.crt" ] && continue
    (
      cd "$dir"
      openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "client-$user.key" 2>/dev/null
      openssl req -new -key "client-$user.key" -out "client-$user.csr" -subj "/CN=$user" 2>/dev/null
      echo "extendedKeyUsage=clientAuth" >"client-$user.ext"
      openssl x509 -req -in "client-$user.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
        -out "client-$user.crt" -days 2 -extfile "client-$user.ext" 2>/dev/null
      rm -f "client-$user.csr" "client-$user.ext"
    )
  done
}

secure() { # start|stop|status
  local name=secure kport=$((port + 1)) mport=$((port + 2)) oport=$((port + 3)) dir="$data/secure"
  local admin_password=${KAFKA_LOCAL_ADMIN_PASSWORD:-admin-secret}
  case $1 in
    start)
      fetch
      node_config $name 1 "$port" "$kport" "1@$host:$kport" 1 1
      make_tls "$dir/tls"
      local u names=(admin)
      for u in ${KAFKA_LOCAL_USERS:-}; do names+=("${u%%:*}"); done
      client_certs "$dir/tls" "${names[@]}"
      # The client listeners are SASL_SSL and, on the port after the controller's, mutual TLS
      # (MTLS: a client certificate required, its CN the principal); the controller listener
      # stays PLAINTEXT on its own port (the node's principal there is ANONYMOUS, hence a super
      # user beside admin).
      sed -i -e "s|^listeners=.*|listeners=SASL_SSL://$host:$port,MTLS://$host:$mport,CONTROLLER://$host:$kport|" \
        -e "s|^advertised.listeners=.*|advertised.listeners=SASL_SSL://$host:$port,MTLS://$host:$mport|" \
        -e "s|^listener.security.protocol.map=.*|listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL,CONTROLLER:PLAINTEXT|" \
        -e "s|^inter.broker.listener.name=.*|inter.broker.listener.name=SASL_SSL|" \
        "$dir/server.properties"
      if [ -n "${KAFKA_LOCAL_OAUTH_JWKS:-}" ]; then
        # SASL_SSL with OAUTHBEARER on port + 3, tokens checked by Kafka's own validator
        # against the JWKS of KAFKA_LOCAL_OAUTH_JWKS (an identity provider's; the principal is
        # the token's sub claim); the JVM may fetch that URL only when allowed by name.
        sed -i -e "s|^listeners=\(.*\),CONTROLLER|listeners=\1,OAUTH://$host:$oport,CONTROLLER|" \
          -e "s|^advertised.listeners=.*|&,OAUTH://$host:$oport|" \
          -e "s|^listener.security.protocol.map=.*|&,OAUTH:SASL_SSL|" \
          "$dir/server.properties"
        cat >>"$dir/server.properties" <<EOF
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=$KAFKA_LOCAL_OAUTH_JWKS
sasl.oauthbearer.expected.audience=${KAFKA_LOCAL_OAUTH_AUDIENCE:-kafka}
sasl.oauthbearer.expected.issuer=${KAFKA_LOCAL_OAUTH_ISSUER:-${KAFKA_LOCAL_OAUTH_JWKS%/*}}
EOF
        jvm_opts="$jvm_opts -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$KAFKA_LOCAL_OAUTH_JWKS"
      fi
      cat >>"$dir/server.properties" <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_password";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$dir/tls/server-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$dir/tls/ca.pem
ssl.client.auth=none
listener.name.mtls.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+)\$/\$1/,DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:ANONYMOUS
EOF
      cat >"$dir/admin.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_password";
ssl.truststore.type=PEM
ssl.truststore.location=$dir/tls/ca.pem
EOF
      if [ ! -f "$dir/data/meta.properties" ]; then
        local java user
        local scram=()
        java=$(java_cmd)
        for user in "admin:$admin_password" ${KAFKA_LOCAL_USERS:-}; do
          scram+=(--add-scram "SCRAM-SHA-512=[name=${user%%:*},password=${user#*:}]")
          scram+=(--add-scram "SCRAM-SHA-256=[name=${user%%:*},password=${user#*:}]")
        done
        # shellcheck disable=SC2046
        "$java" $(fast_opts) -cp "$lib/*" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
          kafka.tools.StorageTool format -c "$dir/server.properties" -t "$(cluster_id $name)" \
          "${scram[@]}" ${feature_flags[@]+"${feature_flags[@]}"} >"$dir/format.log" 2>&1 \
          || { cat "$dir/format.log" >&2; exit 1; }
      fi
      start_node $name "$port" "$(cluster_id $name)"
      wait_ready $name "$port"
      ;;
    stop) stop_node $name ;;
    status)
      if is_running "$dir"; then
        echo "running: pid $(cat "$dir/kafka.pid"), SASL_SSL bootstrap $host:$port, mutual TLS $host:$mport (client-USER.crt/.key), CA $dir/tls/ca.pem, admin config $dir/admin.properties"
      else
        echo "stopped"
        return 3
      fi
      ;;
  esac
}

# acls FILE: the ACLs of FILE on the secured node, through the Java Admin client (the broker's
# jars do not include kafka-acls.sh's AclCommand; Java 11+ runs a one-file program as is).
acls() {
  local file=${1:?acls FILE}
  "$(java_cmd)" -cp "$lib/*" -Dlog4j2.configurationFile="$data/secure/log4j2.properties" \
    "$here/Acls.java" "$data/secure/admin.properties" "$host:$port" "$file"
}

case ${1:-} in
  fetch) fetch ;;
  start-secure) secure start ;;
  stop-secure) secure stop ;;
  status-secure) secure status ;;
  acls) acls "${2:-}" ;;
  start | stop | kill | status) single "$1" ;;
  start3) triple start ;;
  stop3) triple stop ;;
  status3) triple status ;;
  node3) node3 "${2:-}" "${3:-}" ;;
  logs) tail -n "${2:-60}" "$data/single/server.log" ;;
  logs3) tail -n "${3:-60}" "$data/cluster3/node-${2:?node id}/server.log" ;;
  *)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
    ;;
esac
