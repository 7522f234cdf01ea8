#!/bin/bash
# kubegate's memory at rest per configured cluster (passthrough, `clusters:` by server name):
# N clusters of 3 backends each, every backend probed at one simulated replica (its
# `health_address`) so that all are ready. Once every backend is ready and 10 s have passed,
# kubegate's RSS and heap are read from its /metrics.
#
#   bench/clusters-memory.sh [COUNTS] [BIN_DIR]
#     COUNTS: the cluster counts to measure, "1 10 50 100" by default.
#     BIN_DIR: target/release by default.
#
# Needs a release build (`cargo build --release -p kubegate -p kubegate-sim`). Loopback only
# (backends on 127.0.C.R, nobody listening there: only probes run); stops by itself.
set -e
counts=${1:-"1 10 50 100"}
bin=${2:-target/release}
cd "$(dirname "$0")/.."
w=$(mktemp -d /tmp/clmem.XXXX)
"$bin/kubegate-sim" certs "$w/pki" >/dev/null
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metric() { curl -sf "http://127.0.0.1:$admin/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
sim_port=$(port)
"$bin/kubegate-sim" --secure-port "$sim_port" --tls-cert-file "$w/pki/apiserver.crt" \
  --tls-private-key-file "$w/pki/apiserver.key" --client-ca-file "$w/pki/ca.crt" >"$w/sim.log" 2>&1 &
sim=$!
gw=
trap 'kill $sim $gw 2>/dev/null || true' EXIT
echo "| clusters | backends | RSS (MiB) | heap allocated (MiB) |"
echo "|---|---|---|---|"
for n in $counts; do
  listen=$(port)
  admin=$(port)
  config="$w/kubegate-$n.yaml"
  {
    echo "listeners: [ { address: 127.0.0.1:$listen } ]"
    echo "admin: { address: 127.0.0.1:$admin }"
    echo "health: { interval: 5s, tls: { ca_file: $w/pki/ca.crt } }"
    echo "clusters:"
    for c in $(seq 1 "$n"); do
      echo "  - name: c$c"
      echo "    server_names: [c$c.example]"
      echo "    backends:"
      for r in 1 2 3; do
        echo "      - { name: c$c-$r, address: 127.0.$c.$r:6443, health_address: 127.0.0.1:$sim_port }"
      done
    done
  } >"$config"
  "$bin/kubegate" run --config "$config" >"$w/kubegate-$n.log" 2>&1 &
  gw=$!
  deadline=$((SECONDS + 120))
  until [ "$(curl -sf "http://127.0.0.1:$admin/metrics" | awk '$1 ~ /^kubegate_cluster_ready_backends/ { s += $2 } END { print s + 0 }')" = $((3 * n)) ]; do
    [ $SECONDS -lt $deadline ] || { echo "not every backend became ready: $w/kubegate-$n.log"; exit 1; }
    sleep 1
  done
  sleep 10
  rss=$(metric process_resident_memory_bytes)
  heap=$(metric kubegate_heap_allocated_bytes)
  awk -v n="$n" -v rss="$rss" -v heap="$heap" \
    'BEGIN { printf "| %d | %d | %.1f | %.2f |\n", n, 3 * n, rss / 1048576, heap / 1048576 }'
  kill "$gw"
  wait "$gw" 2>/dev/null || true
  gw=
done
