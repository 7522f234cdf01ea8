# Terminate mode (L7) beside Envoy and HAProxy terminating TLS; sourced by bench/run.sh after
# the passthrough part, with its helpers (port, wait_port, start_nginx, cpu_ticks, rss_kib),
# $work, $bin, $duration, $rounds and $smoke. See bench/README.md.
#
# Every proxy runs the configuration the failover load test gives it (kubegate-loadtest
# gateway): TLS from the client, HTTP/2 with the front-proxy certificate upstream, identity
# headers, /readyz checks. kubegate runs one worker thread, as the peers do.

# kubegate-l7-logged: kubegate-l7 with the access log on (JSON, every line written to a file):
# what the log costs per request. kubegate-l7-rules: kubegate-l7 with 20 dispatch rules no
# request matches: what matching costs per request. kubegate-l7-token: kubegate-l7 itself,
# its clients sending a bearer token instead of a client certificate, which kubegate names
# with a TokenReview (the backend answers one) and then finds in its cache: what naming a
# token client costs per request, warm. L7_TARGETS="direct kubegate-l7 kubegate-l7-rules"
# measures only those in the rounds (an A/B with more rounds in the time).
read -r -a l7_targets <<<"${L7_TARGETS:-direct kubegate-l7 kubegate-l7-logged kubegate-l7-rules kubegate-l7-token envoy-l7 haproxy-l7}"
bench_token=bench-token
small_path=/api/v1/namespaces/default/configmaps/small
list_path=/api/v1/configmaps
s_time_secs=$([ "$smoke" = 1 ] && echo 1 || echo "${duration%s}")
idle_h2_n=$([ "$smoke" = 1 ] && echo 100 || echo 2000)
watch_n=$([ "$smoke" = 1 ] && echo 200 || echo 10000)
watch_secs=$([ "$smoke" = 1 ] && echo 3 || echo 20)

# The backend: nginx over TLS (HTTP/2 and HTTP/1.1) answering like an apiserver: a small JSON
# object, a 1 MiB JSON list, /readyz.
mkdir -p "$work/www7"
python3 - "$work/www7" <<'PY'
import json, sys
d = sys.argv[1]
cm = lambda i: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": "default", "resourceVersion": str(1000 + i), "uid": f"00000000-0000-0000-0000-{i:012d}"}, "data": {"key": "v" * 64}}
open(f"{d}/small.json", "w").write(json.dumps(cm(0)))
items, size = [], 0
while size < 1024 * 1024:
    items.append(cm(len(items))); size += len(json.dumps(items[-1])) + 1
open(f"{d}/list.json", "w").write(json.dumps({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "99999"}, "items": items})[:1024 * 1024 - 2] + "]}")
PY
small_size=$(stat -c %s "$work/www7/small.json")
list_size=$(stat -c %s "$work/www7/list.json")
backend7=$(port)
start_nginx backend7 "$(cat <<CONF
  default_type application/json;
  http2_max_concurrent_streams 1000;
  ssl_certificate $work/pki/apiserver.crt;
  ssl_certificate_key $work/pki/apiserver.key;
  server {
    listen 127.0.0.1:$backend7 ssl http2 backlog=4096;
    location = /readyz { return 200 "ok"; }
    location = /apis/authentication.k8s.io/v1/tokenreviews {
      return 201 '{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","status":{"authenticated":true,"user":{"username":"system:serviceaccount:bench:client","groups":["system:serviceaccounts","system:serviceaccounts:bench","system:authenticated"]}}}';
    }
    location = $small_path { alias $work/www7/small.json; }
    location = $list_path { alias $work/www7/list.json; }
  }
CONF
)"
wait_port "$backend7"

declare -A listen7 pid7 auth7
listen7[direct]=$backend7

# Starts L7 gateway $1 in front of backend address $2 with its files in $work/$3; sets
# started_pid and started_port.
declare -A admin7
start_l7() {
  local name=$1 backend=$2 dir=$work/$3 p lines admin
  p=$(port)
  mapfile -t lines < <("$bin/kubegate-loadtest" gateway "$name" --listen "127.0.0.1:$p" \
    --backend "$backend" --pki "$work/pki" --dir "$dir" --threads 1)
  admin=${lines[0]}
  KUBEGATE_LOG=warn "${lines[@]:1}" >"$dir/$name.out" 2>"$dir/$name.log" & started_pid=$!; pids+=($!)
  started_port=$p
  admin7[$name]=$admin
  wait_port "$p"
  if [ "$admin" != - ]; then until curl -sf "http://$admin/readyz" >/dev/null; do sleep 0.1; done; fi
}

for t in kubegate-l7 kubegate-l7-logged kubegate-l7-rules envoy-l7 haproxy-l7; do
  start_l7 "$t" "127.0.0.1:$backend7" "$t"
  listen7[$t]=$started_port; pid7[$t]=$started_pid
done
# The same process as kubegate-l7; only its clients differ (a bearer token).
listen7[kubegate-l7-token]=${listen7[kubegate-l7]}; pid7[kubegate-l7-token]=${pid7[kubegate-l7]}
auth7[kubegate-l7-token]="Authorization: Bearer $bench_token"
# The header curl, h2load and wrk add for target $1 (none but for the token target).
auth_args() { if [ -n "${auth7[$1]:-}" ]; then printf '%s\n' -H "${auth7[$1]}"; fi; }

# Every target must serve both bodies whole over HTTP/2 before anything is measured.
for t in "${l7_targets[@]}"; do
  for f in "$small_path:$small_size" "$list_path:$list_size"; do
    for _ in $(seq 1 50); do
      mapfile -t auth < <(auth_args "$t")
      got=$(curl -sk --http2 "${auth[@]}" -o /dev/null -w '%{http_code} %{size_download} %{http_version}' "https://127.0.0.1:${listen7[$t]}${f%%:*}")
      [ "$got" = "200 ${f#*:} 2" ] && break
      sleep 0.1
    done
    [ "$got" = "200 ${f#*:} 2" ] || { echo "$t: ${f%%:*} answered '$got', expected '200 ${f#*:} 2'" >&2; exit 1; }
  done
done

proxy7_ticks() { if [ "$1" = direct ]; then echo 0; else cpu_ticks "${pid7[$1]}"; fi; }
per() { # ticks0 ticks1 count target -> µs of proxy CPU per item, or -
  python3 -c "print(f'{($2-$1)*1e6/100/max($3,1):.1f}' if '$4'!='direct' else '-')"
}

# Idle TLS HTTP/2 connections on the fresh processes, before any load.
results7=$work/l7.tsv
: > "$results7"
for t in kubegate-l7 envoy-l7 haproxy-l7; do
  kib=$(python3 bench/h2idle.py conns "${listen7[$t]}" "$idle_h2_n" "${pid7[$t]}")
  printf 'idle\t%s\t%s\n' "$t" "$kib" >> "$results7"
  echo "L7 $t: $kib KiB per idle TLS HTTP/2 connection" >&2
done

measure7() { # target round
  local t=$1 r=$2 p=${listen7[$1]} out c0 c1 reqs rps p50 p99 lf auth
  lf=$work/h2load-$t.log
  mapfile -t auth < <(auth_args "$t")
  c0=$(proxy7_ticks "$t")
  out=$(h2load -c 10 -m 10 -D "${duration%s}" "${auth[@]}" --log-file "$lf" "https://127.0.0.1:$p$small_path")
  c1=$(proxy7_ticks "$t")
  reqs=$(awk '/^requests:/{print $8}' <<<"$out")
  rps=$(awk '/^finished in/{print $4}' <<<"$out")
  read -r p50 p99 < <(awk '{print $3}' "$lf" | sort -n | awk '{v[NR]=$1} END{print v[int(NR*0.5)+1]/1000, v[int(NR*0.99)+1]/1000}')
  h2cpu=$(per "$c0" "$c1" "$reqs" "$t")
  c0=$(proxy7_ticks "$t")
  out=$(wrk -t1 -c50 -d"$duration" "${auth[@]}" "https://127.0.0.1:$p$small_path")
  c1=$(proxy7_ticks "$t")
  h1rps=$(awk '/^Requests\/sec/{print $2}' <<<"$out")
  h1cpu=$(per "$c0" "$c1" "$(awk '/requests in/{print $1}' <<<"$out")" "$t")
  c0=$(proxy7_ticks "$t")
  out=$(openssl s_time -connect "127.0.0.1:$p" -new -time "$s_time_secs" -www "$small_path" 2>/dev/null)
  c1=$(proxy7_ticks "$t")
  n=$(awk '/connections in .* real seconds/{print $1; exit}' <<<"$out")
  newc=$(python3 -c "print(f'{$n/$s_time_secs:.0f}')"); newcpu=$(per "$c0" "$c1" "$n" "$t")
  c0=$(proxy7_ticks "$t")
  out=$(openssl s_time -connect "127.0.0.1:$p" -reuse -time "$s_time_secs" -www "$small_path" 2>/dev/null)
  c1=$(proxy7_ticks "$t")
  n=$(awk '/connections in .* real seconds/{print $1; exit}' <<<"$out")
  resc=$(python3 -c "print(f'{$n/$s_time_secs:.0f}')"); rescpu=$(per "$c0" "$c1" "$n" "$t")
  out=$(h2load -c 8 -m 1 -D "${duration%s}" "https://127.0.0.1:$p$list_path")
  bulk=$(awk '/^traffic:/{gsub(/[()]/,"",$3); print $3/1e6/'"${duration%s}"'}' <<<"$out")
  printf 'round\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$r" "$rps" "$p50" "$p99" "$h2cpu" "$h1rps" "$h1cpu" "$newc" "$newcpu" "$resc" "$rescpu" "$bulk" >> "$results7"
  echo "L7 round $r $t: h2 $rps rps p50 $p50 p99 $p99 ms, $h2cpu us/req; h1 $h1rps rps $h1cpu us/req; new TLS $newc/s $newcpu us; resumed $resc/s $rescpu us; bulk $bulk MB/s" >&2
}

for r in $(seq 1 "$rounds"); do
  for t in "${l7_targets[@]}"; do measure7 "$t" "$r"; done
done
if [[ " ${l7_targets[*]} " == *" kubegate-l7-token "* ]]; then
  reviews=$(curl -s "http://${admin7[kubegate-l7]}/metrics" | awk '/^kubegate_token_reviews_total\{result="named"\}/{print $2}')
  printf 'reviews\tkubegate-l7-token\t%s\n' "${reviews:-0}" >> "$results7"
  echo "L7 kubegate-l7-token: ${reviews:-0} TokenReviews sent for the whole run" >&2
fi

# Idle watches: a fresh proxy per target in front of a simulated apiserver that checks the
# front-proxy identity; the watches ask for bookmarks, as informers do.
sim7=$(port)
"$bin/kubegate-sim" --secure-port "$sim7" --tls-cert-file "$work/pki/apiserver.crt" \
  --tls-private-key-file "$work/pki/apiserver.key" --client-ca-file "$work/pki/ca.crt" \
  --requestheader-client-ca-file "$work/pki/front-proxy-ca.crt" \
  --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- 2>"$work/sim7.log" & pids+=($!)
wait_port "$sim7"
for t in kubegate-l7 envoy-l7 haproxy-l7; do
  start_l7 "$t" "127.0.0.1:$sim7" "watch-$t"
  read -r kib cpu < <(python3 bench/h2idle.py watches "$started_port" "$watch_n" "$started_pid" "$work/pki" "$watch_secs")
  printf 'watch\t%s\t%s\t%s\n' "$t" "$kib" "$cpu" >> "$results7"
  echo "L7 $t: $watch_n watches, $kib KiB and $cpu us CPU per second per watch" >&2
  kill "$started_pid"; wait "$started_pid" 2>/dev/null || true
done
