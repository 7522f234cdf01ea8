#!/bin/bash
# CPU per HTTP/2 request of kubegate builds side by side with HAProxy, rounds alternated on one
# machine: `h2load -c 10 -m 10` for a small JSON object through each gateway (terminate mode,
# one worker thread, the configuration `kubegate-loadtest gateway` gives it) in front of one
# TLS nginx; each gateway's utime + stime per request — the "CPU µs per HTTP/2 request" of
# bench/README.md, without the rest of bench/run.sh.
#
#   bench/ab-l7.sh [--rounds N] [--seconds S] [--syscalls] NAME=BINDIR ...
#   bench/ab-l7.sh before=/tmp/before/target/release after=target/release
#
# --syscalls: then, for each gateway, the writes and reads it makes per request under the same
# load (5 s; `perf stat` on its syscall tracepoints, which needs root and perf).
#
# Each BINDIR holds a release build's kubegate and kubegate-loadtest; HAProxy (haproxy-l7) is
# measured in every round beside them. Prints one line per measurement and the medians.
# Needs nginx, haproxy and h2load (scripts/install-peers).
set -euo pipefail
rounds=5; seconds=10; syscalls=
while [ $# -gt 0 ]; do
  case "$1" in
    --syscalls) syscalls=1; shift ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    *=*) break ;;
    *) echo "usage: bench/ab-l7.sh [--rounds N] [--seconds S] [--syscalls] NAME=BINDIR ..." >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: bench/ab-l7.sh [--rounds N] [--seconds S] [--syscalls] NAME=BINDIR ..." >&2; exit 2; }
cd "$(dirname "$0")/.."
w=$(mktemp -d /tmp/kubegate-ab.XXXXXX); chmod 755 "$w"
pids=()
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

declare -A bins
names=()
for arg in "$@"; do
  name=${arg%%=*}; dir=$(cd "${arg#*=}" && pwd)
  [ -x "$dir/kubegate" ] && [ -x "$dir/kubegate-loadtest" ] || { echo "$dir: no kubegate build" >&2; exit 2; }
  bins[$name]=$dir; names+=("$name")
done
first=${bins[${names[0]}]}
"$first/kubegate-sim" certs "$w/pki" >/dev/null
path=/api/v1/namespaces/default/configmaps/small
echo '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"small","namespace":"default","resourceVersion":"1000"},"data":{"key":"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"}}' > "$w/small.json"
b=$(port)
cat > "$w/nginx.conf" <<CONF
worker_processes 1; error_log $w/nginx.err crit; pid $w/nginx.pid; events { worker_connections 2000; }
http { access_log off; default_type application/json; keepalive_requests 1000000; http2_max_concurrent_streams 1000;
 ssl_certificate $w/pki/apiserver.crt; ssl_certificate_key $w/pki/apiserver.key;
 server { listen 127.0.0.1:$b ssl http2; location = /readyz { return 200 "ok"; } location = $path { alias $w/small.json; } } }
CONF
nginx -p "$w" -c "$w/nginx.conf" -g 'daemon off; master_process off;' & pids+=($!)

declare -A listen pid
start() { # label loadtest-bindir gateway
  local p lines
  p=$(port)
  mapfile -t lines < <("$2/kubegate-loadtest" gateway "$3" --listen "127.0.0.1:$p" \
    --backend "127.0.0.1:$b" --pki "$w/pki" --dir "$w/$1" --threads 1)
  KUBEGATE_LOG=warn "${lines[@]:1}" >"$w/$1.out" 2>"$w/$1.log" & pids+=($!)
  listen[$1]=$p; pid[$1]=$!
  for _ in $(seq 1 100); do
    [ "$(curl -sk --http2 -o /dev/null -w '%{http_code}' "https://127.0.0.1:$p$path")" = 200 ] && return 0
    sleep 0.1
  done
  echo "$1 does not answer" >&2; exit 1
}
targets=()
for n in "${names[@]}"; do start "$n" "${bins[$n]}" kubegate-l7; targets+=("$n"); done
start haproxy "$first" haproxy-l7; targets+=(haproxy)

for t in "${targets[@]}"; do h2load -c 10 -m 10 -D 2 "https://127.0.0.1:${listen[$t]}$path" >/dev/null; done
: > "$w/results"
for r in $(seq 1 "$rounds"); do
  for t in "${targets[@]}"; do
    c0=$(ticks "${pid[$t]}")
    out=$(h2load -c 10 -m 10 -D "$seconds" "https://127.0.0.1:${listen[$t]}$path")
    c1=$(ticks "${pid[$t]}")
    reqs=$(awk '/^requests:/{print $8}' <<<"$out")
    us=$(python3 -c "print(f'{($c1-$c0)*1e6/100/max($reqs,1):.2f}')")
    rps=$(awk '/^finished in/{print $4}' <<<"$out")
    printf '%s\t%s\t%s\t%s\n' "$r" "$t" "$us" "$rps" | tee -a "$w/results"
  done
done
echo "median CPU µs per HTTP/2 request (min–max), requests/s:"
for t in "${targets[@]}"; do
  awk -v t="$t" '$2==t{print $3, $4}' "$w/results" | sort -n | awk -v t="$t" '
    {v[NR]=$1; r[NR]=$2} END {m=int((NR+1)/2); printf "%-10s %s (%s–%s), %s\n", t, v[m], v[1], v[NR], r[m]}'
done
[ -n "$syscalls" ] || exit 0
echo "system calls per HTTP/2 request (h2load -c 10 -m 10, 5 s):"
events=syscalls:sys_enter_writev,syscalls:sys_enter_write,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg
events=$events,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmsg,syscalls:sys_enter_epoll_wait
for t in "${targets[@]}"; do
  perf stat -x, -e "$events" -p "${pid[$t]}" -o "$w/$t.stat" -- sleep 5 &
  sp=$!
  out=$(h2load -c 10 -m 10 -D 5 "https://127.0.0.1:${listen[$t]}$path")
  wait $sp
  reqs=$(awk '/^requests:/{print $8}' <<<"$out")
  awk -F, -v t="$t" -v n="$reqs" '$3 ~ /syscalls/ && $1 > 0 {
    sub("syscalls:sys_enter_", "", $3); printf "%-10s %-12s %.3f\n", t, $3, $1 / n }' "$w/$t.stat"
done
