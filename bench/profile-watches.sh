#!/bin/bash
# Profiles kubegate in terminate mode at rest with many busy watches: the scale run
# (`kubegate-loadtest scale`, one gateway, C = W/5, docs/failover.md "Scale") with a long
# settle period; once the share has settled after the rolling restart, `perf stat` (CPU used)
# and then `perf record` (where it goes) are attached to the gateway for 20 s each.
#
#   [GATEWAY=envoy-l7] bench/profile-watches.sh [WATCHES] [BIN_DIR]
#     GATEWAY: kubegate-l7 by default; any gateway the scale run knows, to measure a peer the
#     same way.
#     WATCHES: 10000 by default.
#     BIN_DIR: target/release by default; another build's (a worktree's target/release) to
#     compare two commits under the same load.
#
# Needs perf and a release build (`cargo build --release -p kubegate -p kubegate-sim -p
# kubegate-loadtest`). Loopback only; the run stops by itself (about 4 minutes at 10,000).
set -e
gateway=${GATEWAY:-kubegate-l7}
watches=${1:-10000}
bin=${2:-target/release}
cd "$(dirname "$0")/.."
w=$(mktemp -d /tmp/profw.XXXX)
"$bin/kubegate-loadtest" scale --gateways "$gateway" --watches "$watches" \
  --connections $((watches / 5)) --settle 120s --dir "$w/run" >"$w/scale.log" 2>&1 &
run=$!
trap 'kill $run 2>/dev/null || true' EXIT
# The last replica restarting; then its return and the moves that even the share (under 60 s).
until grep -q "restart replica-3" "$w/scale.log"; do
  kill -0 $run 2>/dev/null || { cat "$w/scale.log"; exit 1; }
  sleep 1
done
sleep 70
# The gateway's process: the one started with its configuration (under `<dir>/w<W>/<gateway>/gateway/`).
pid=$(pgrep -f "$w/run/w$watches/$gateway/gateway/" | head -1)
perf stat -e task-clock -p "$pid" -- sleep 20 2>&1 | grep -E "task-clock|seconds time"
perf record -F 999 -g -p "$pid" -o "$w/perf.data" -- sleep 20 2>/dev/null
wait $run
grep -E "^\| [0-9]+ \(|$gateway at" "$w/scale.log" || true
perf report -i "$w/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -8
echo ---
perf report -i "$w/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -40
echo "$w"
