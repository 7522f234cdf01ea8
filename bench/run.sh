#!/usr/bin/env bash
# Side-by-side proxy benchmark, interleaved rounds on one machine, each proxy with one worker
# and logging off: passthrough (direct, kubegate, HAProxy, nginx stream, Envoy), then
# terminate mode (direct, kubegate, Envoy and HAProxy terminating TLS; bench/l7.sh). See
# bench/README.md.
#
#   bench/run.sh              full run (release build, 5 rounds) -> bench/RESULTS.md
#   bench/run.sh --rounds N   the same with N rounds
#   bench/run.sh --smoke      one short round with the debug build (CI keeps the script working)
#   bench/run.sh --only l4    (or l7) one part only; with --smoke or --rounds too
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

smoke=0; rounds=5; duration=5s; idle_n=9000; parts="l4 l7"
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1; rounds=1; duration=1s; idle_n=500 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift ;;
    --only) parts=${2:?--only needs l4 or l7}; shift ;;
    *) echo "usage: bench/run.sh [--smoke | --rounds N] [--only l4|l7]" >&2; exit 2 ;;
  esac
  shift
done

./scripts/install-deps >/dev/null
./scripts/install-peers >/dev/null

if [ $smoke = 1 ]; then
  cargo build --workspace --bins --quiet
  bin=$root/target/debug
else
  cargo build --release -p kubegate -p kubegate-sim -p kubegate-loadtest --quiet
  bin=$root/target/release
fi

work=$(mktemp -d /tmp/kubegate-bench.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
ulimit -n 20000

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Starts nginx $1 (its files $work/$1.*): one worker, no access log, connections kept, with
# the further http settings and servers $2.
start_nginx() {
  cat > "$work/$1.conf" <<CONF
worker_processes 1;
error_log $work/$1-error.log crit;
pid $work/$1.pid;
events { worker_connections 20000; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
$2
}
CONF
  nginx -p "$work" -c "$work/$1.conf" -g 'daemon off; master_process off;' & pids+=($!)
}
wait_port() { for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 not listening" >&2; return 1; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$1/status"; }

# The backend: nginx over plain HTTP with 1 KiB and 1 MiB bodies.
mkdir -p "$work/www"
head -c 1024 /dev/zero | tr '\0' a > "$work/www/1k"
head -c $((1024*1024)) /dev/zero | tr '\0' b > "$work/www/1m"
backend=$(port)
start_nginx backend "  sendfile on;
  server { listen 127.0.0.1:$backend backlog=4096; root $work/www; }"
wait_port "$backend"

# kubegate probes readiness on a simulated apiserver (health_address) over TLS.
"$bin/kubegate-sim" certs "$work/pki" >/dev/null
probe=$(port)
"$bin/kubegate-sim" --secure-port "$probe" --tls-cert-file "$work/pki/apiserver.crt" \
  --tls-private-key-file "$work/pki/apiserver.key" 2>"$work/probe.log" & pids+=($!)
wait_port "$probe"

declare -A listen pid
listen[direct]=$backend

kg=$(port); kg_admin=$(port)
cat > "$work/kubegate.yaml" <<CONF
listeners: [{address: 127.0.0.1:$kg}]
backends:
  - name: backend
    address: 127.0.0.1:$backend
    health_address: 127.0.0.1:$probe
health: {interval: 1s, tls: {ca_file: $work/pki/ca.crt, server_name: kubernetes}}
admin: {address: 127.0.0.1:$kg_admin}
threads: 1
CONF
KUBEGATE_LOG=warn "$bin/kubegate" run --config "$work/kubegate.yaml" 2>"$work/kubegate.log" & pid[kubegate]=$!; pids+=($!)
listen[kubegate]=$kg
wait_port "$kg"
until curl -sf "http://127.0.0.1:$kg_admin/readyz" >/dev/null; do sleep 0.1; done
kubegate_startup_rss=$(rss_kib "${pid[kubegate]}")
kubegate_binary=$(stat -c %s "$bin/kubegate")

# The health checker's cost: kubegate's CPU time (schedstat of all its threads, ns) while idle with probes every
# second, per probe (the probe count comes from its own metrics; the two scrapes are included).
sched_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s+=$1} END{print s}'; }
probes() { curl -sf "http://127.0.0.1:$kg_admin/metrics" | awk '/^kubegate_backend_probes_total/{s+=$2} END{print s+0}'; }
checker_s=$([ $smoke = 1 ] && echo 3 || echo 20)
n0=$(probes); c0=$(sched_ns "${pid[kubegate]}")
sleep "$checker_s"
c1=$(sched_ns "${pid[kubegate]}"); n1=$(probes)
checker=$(python3 -c "print(f'{($c1-$c0)/($checker_s*1e9)*100:.3f}% of one core, {($c1-$c0)/1e3/max($n1-$n0,1):.0f} µs per probe over {$n1-$n0} probes')")
echo "health checks while idle: $checker" >&2

hp=$(port)
cat > "$work/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 9800
defaults
  mode tcp
  timeout connect 5s
  timeout client 10m
  timeout server 10m
frontend fe
  bind 127.0.0.1:$hp
  default_backend be
backend be
  balance leastconn
  server backend 127.0.0.1:$backend
CONF
haproxy -db -f "$work/haproxy.cfg" 2>"$work/haproxy.log" & pid[haproxy]=$!; pids+=($!)
listen[haproxy]=$hp
wait_port "$hp"

ng=$(port)
cat > "$work/nginx-stream.conf" <<CONF
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
worker_rlimit_nofile 20000;
error_log $work/nginx-stream-error.log crit;
pid $work/nginx-stream.pid;
events { worker_connections 19000; }
stream {
  upstream be { least_conn; server 127.0.0.1:$backend; }
  server { listen 127.0.0.1:$ng backlog=4096; proxy_pass be; proxy_timeout 10m; }
}
CONF
nginx -p "$work" -c "$work/nginx-stream.conf" -g 'daemon off; master_process off;' & pid[nginx]=$!; pids+=($!)
listen[nginx]=$ng
wait_port "$ng"

envoy_bin=$(python3 -c 'import envoy,os;print(os.path.join(os.path.dirname(envoy.__file__),"_bin","envoy"))')
ev=$(port)
cat > "$work/envoy.yaml" <<CONF
static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 127.0.0.1, port_value: $ev}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: bench
          cluster: be
  clusters:
  - name: be
    type: STATIC
    connect_timeout: 1s
    lb_policy: LEAST_REQUEST
    load_assignment:
      cluster_name: be
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $backend}}}}]}]
CONF
"$envoy_bin" -c "$work/envoy.yaml" --concurrency 1 --log-level critical --base-id "$ev" 2>"$work/envoy.log" & pid[envoy]=$!; pids+=($!)
listen[envoy]=$ev
wait_port "$ev"

targets=(direct kubegate haproxy nginx envoy)
results=$work/results.tsv
: > "$results"

# Every target must serve the real bodies before anything is measured through it.
for t in direct kubegate haproxy nginx envoy; do
  for f in 1k:1024 1m:1048576; do
    got=$(curl -s -o /dev/null -w '%{http_code} %{size_download}' "http://127.0.0.1:${listen[$t]}/${f%%:*}")
    [ "$got" = "200 ${f#*:}" ] || { echo "$t: /${f%%:*} answered '$got', expected '200 ${f#*:}'" >&2; exit 1; }
  done
done

# The machine's CPU time in ticks from /proc/stat: total, steal, and busy (user, nice, system,
# irq, softirq, steal). Work the kernel does for a proxy outside its process (softirqs in other
# processes, kernel workers) shows up in busy.
cpu_line() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $9, $2+$3+$4+$7+$8+$9}' /proc/stat; }
busy_ticks() { cpu_line | cut -d' ' -f3; }
proxy_ticks() { if [ "$1" = direct ]; then echo 0; else cpu_ticks "${pid[$1]}"; fi; }

measure() { # target round
  local t=$1 r=$2 p=${listen[$1]} out before after busy0 busy1 reqs conns
  before=$(proxy_ticks "$t"); busy0=$(busy_ticks)
  out=$(wrk -t1 -c50 -d"$duration" --latency "http://127.0.0.1:$p/1k")
  after=$(proxy_ticks "$t"); busy1=$(busy_ticks)
  reqs=$(awk '/requests in/{print $1}' <<<"$out")
  rps=$(awk '/^Requests\/sec/{print $2}' <<<"$out")
  p50=$(awk '$1=="50%"{print $2}' <<<"$out")
  p99=$(awk '$1=="99%"{print $2}' <<<"$out")
  cpu_us=$(python3 -c "print(f'{($after-$before)*1e6/100/$reqs:.2f}' if '$t'!='direct' else '-')")
  machine_us=$(python3 -c "print(f'{($busy1-$busy0)*1e6/100/$reqs:.2f}')")
  before=$(proxy_ticks "$t")
  out=$(wrk -t1 -c50 -d"$duration" -H 'Connection: close' "http://127.0.0.1:$p/1k")
  after=$(proxy_ticks "$t")
  conn=$(awk '/^Requests\/sec/{print $2}' <<<"$out")
  conns=$(awk '/requests in/{print $1}' <<<"$out")
  conn_cpu=$(python3 -c "print(f'{($after-$before)*1e6/100/$conns:.1f}' if '$t'!='direct' else '-')")
  bulk=$(wrk -t1 -c8 -d"$duration" "http://127.0.0.1:$p/1m" | awk '/^Transfer\/sec/{v=$2; if (v ~ /GB/) {sub("GB","",v); v*=1024} else {sub("MB","",v)}; print v}')
  # Idle memory only in the first round: later rounds would reuse what the allocator kept from
  # the first one and show nearly nothing.
  idle=-
  if [ "$t" != direct ] && [ "$r" = 1 ]; then idle=$(python3 bench/idle.py "$p" "$idle_n" "${pid[$t]}"); fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$r" "$rps" "$p50" "$p99" "$conn" "$bulk" "$idle" "$cpu_us" "$conn_cpu" "$machine_us" >> "$results"
  echo "round $r $t: $rps rps, p99 $p99, $conn conn/s, $bulk MB/s, $idle KiB/idle conn, $cpu_us us/req, $conn_cpu us/conn, machine $machine_us us/req" >&2
}

read -r total0 steal0 _ < <(cpu_line)
if [[ " $parts " == *" l4 "* ]]; then
  for r in $(seq 1 "$rounds"); do
    for t in "${targets[@]}"; do measure "$t" "$r"; done
  done
fi
results7=/dev/null
if [[ " $parts " == *" l7 "* ]]; then
  # shellcheck source=bench/l7.sh
  source bench/l7.sh
fi

read -r total1 steal1 _ < <(cpu_line)
steal=$(( (steal1 - steal0) * 100 / (total1 - total0 + 1) ))
python3 bench/summarize.py "$results" "$kubegate_startup_rss" "$kubegate_binary" "$smoke" "$idle_n" "$duration" "$rounds" "$steal" "$checker" "$results7" "$parts"
