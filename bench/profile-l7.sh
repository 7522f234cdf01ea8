#!/bin/bash
# Profiles kubegate in terminate mode (release build, one worker) against a TLS nginx backend:
# `perf record` for 10 s, then the shares by library and the top symbols.
#
#   bench/profile-l7.sh [small|bulk]
#     small (default): h2load -c 10 -m 10, a small JSON GET (the CPU-per-request figure);
#     bulk: h2load -c 8 -m 1, the 1 MiB LIST body (the bulk MB/s figure).
#   PERF_CALLGRAPH="--call-graph dwarf,16384" gives callers that frame pointers cannot
#   (release builds have none); the default is -g. GATEWAY=kubegate-l7-rules (or another
#   name `kubegate-loadtest gateway` knows) profiles that configuration instead; BIN=DIR takes
#   the build from DIR (default target/release).
#
# Needs perf, nginx, h2load (scripts/install-peers) and a release build
# (`cargo build --release -p kubegate -p kubegate-sim -p kubegate-loadtest`).
set -e
workload=${1:-small}
case $workload in
  small) path=/api/v1/namespaces/default/configmaps/small; load=(-c 10 -m 10) ;;
  bulk) path=/api/v1/configmaps; load=(-c 8 -m 1) ;;
  *) echo "usage: $0 [small|bulk]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
bin=${BIN:-target/release}
w=$(mktemp -d /tmp/prof.XXXX); chmod 755 $w
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
$bin/kubegate-sim certs $w/pki >/dev/null
mkdir -p $w/www
python3 -c 'import sys; body = "{\"kind\":\"ConfigMapList\",\"items\":[" + ",".join(["{\"data\":{\"key\":\"" + "v" * 200 + "\"}}"] * 4700); sys.stdout.write(body + "]}")' > $w/www/list.json
echo '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"small","namespace":"default","resourceVersion":"1000"},"data":{"key":"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"}}' > $w/www/small.json
b=$(port)
cat > $w/b.conf <<CONF
worker_processes 1; error_log $w/b.err crit; pid $w/b.pid; events { worker_connections 2000; }
http { access_log off; default_type application/json; keepalive_requests 1000000; http2_max_concurrent_streams 1000;
 ssl_certificate $w/pki/apiserver.crt; ssl_certificate_key $w/pki/apiserver.key;
 server { listen 127.0.0.1:$b ssl http2; location = /readyz { return 200 "ok"; } location = /api/v1/namespaces/default/configmaps/small { alias $w/www/small.json; }
 location = /api/v1/configmaps { alias $w/www/list.json; } } }
CONF
nginx -p $w -c $w/b.conf -g 'daemon off; master_process off;' & npid=$!
kpid=
trap 'kill $npid $kpid 2>/dev/null || true' EXIT
p=$(port)
mapfile -t lines < <($bin/kubegate-loadtest gateway ${GATEWAY:-kubegate-l7} --listen 127.0.0.1:$p --backend 127.0.0.1:$b --pki $w/pki --dir $w/kg --threads 1)
KUBEGATE_LOG=warn "${lines[@]:1}" 2>$w/kg.log & kpid=$!
until curl -sf "http://${lines[0]}/readyz" >/dev/null; do sleep 0.1; done
sleep 1
h2load "${load[@]}" -D 3 "https://127.0.0.1:$p$path" >/dev/null
perf record -F 1999 ${PERF_CALLGRAPH:--g} -p $kpid -o $w/perf.data -- sleep 10 2>/dev/null &
rpid=$!
h2load "${load[@]}" -D 10 "https://127.0.0.1:$p$path" | grep -E "^finished|^requests:|^traffic:"
wait $rpid || true
perf report -i $w/perf.data --no-children --sort dso --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -15
echo ---
perf report -i $w/perf.data --no-children --sort sym --stdio -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -45
echo $w
