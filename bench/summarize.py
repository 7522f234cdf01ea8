#!/usr/bin/env python3
"""Turns bench/run.sh's per-round measurements into the results table (medians, min-max)."""
import datetime, os, platform, statistics, subprocess, sys

path, startup_rss, binary, smoke, idle_n, duration, rounds, steal, checker, path7, parts = sys.argv[1:12]
smoke = smoke == "1"

def ms(v):
    if v.endswith("us"): return float(v[:-2]) / 1000
    if v.endswith("ms"): return float(v[:-2])
    if v.endswith("s"): return float(v[:-1]) * 1000
    return float(v)

def num(v):
    v = v.strip()
    if v.endswith("k"): return float(v[:-1]) * 1000
    return float(v)

rows = {}
for line in open(path):
    t, r, rps, p50, p99, conn, bulk, idle, cpu, conn_cpu, machine = line.rstrip("\n").split("\t")
    d = rows.setdefault(t, {k: [] for k in ("rps", "p50", "p99", "conn", "bulk", "idle", "cpu", "conn_cpu", "machine")})
    d["rps"].append(num(rps)); d["p50"].append(ms(p50)); d["p99"].append(ms(p99))
    d["conn"].append(num(conn)); d["bulk"].append(float(bulk))
    if idle != "-": d["idle"].append(float(idle))
    if cpu != "-": d["cpu"].append(float(cpu))
    if conn_cpu != "-": d["conn_cpu"].append(float(conn_cpu))
    d["machine"].append(float(machine))

def cell(vals, fmt):
    if not vals: return "—"
    med = statistics.median(vals)
    if len(vals) == 1: return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"

def version(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (out.stdout + out.stderr).strip().splitlines()[0]
    except Exception as e:
        return f"unknown ({e})"

lines = []
lines.append("| target | keep-alive rps | p50 ms | p99 ms | conn/s | bulk MB/s | KiB/idle conn | CPU µs/req | CPU µs/conn | machine µs/req |")
lines.append("|---|---|---|---|---|---|---|---|---|---|")
for t in ["direct", "kubegate", "haproxy", "nginx", "envoy"]:
    if t not in rows: continue
    d = rows[t]
    lines.append(f"| {t} | {cell(d['rps'], '{:,.0f}')} | {cell(d['p50'], '{:.2f}')} | {cell(d['p99'], '{:.2f}')} | {cell(d['conn'], '{:,.0f}')} | {cell(d['bulk'], '{:,.0f}')} | {cell(d['idle'], '{:.2f}')} | {cell(d['cpu'], '{:.1f}')} | {cell(d['conn_cpu'], '{:.1f}')} | {cell(d['machine'], '{:.1f}')} |")
table = "\n".join(lines) if rows else "(not run: `--only l7`)"

# Terminate mode: per-round figures, idle connections and idle watches.
rows7, idle7, watch7, reviews7 = {}, {}, {}, None
for line in open(path7):
    f = line.rstrip("\n").split("\t")
    if f[0] == "reviews":
        reviews7 = f[2]
    elif f[0] == "idle":
        idle7[f[1]] = float(f[2])
    elif f[0] == "watch":
        watch7[f[1]] = (float(f[2]), float(f[3]))
    elif f[0] == "round":
        keys = ("rps", "p50", "p99", "cpu", "h1rps", "h1cpu", "new", "newcpu", "res", "rescpu", "bulk")
        d = rows7.setdefault(f[1], {k: [] for k in keys})
        for k, v in zip(keys, f[3:]):
            if v != "-":
                d[k].append(num(v))
l7 = []
if rows7:
    l7.append("| target | HTTP/2 rps | p50 ms | p99 ms | CPU µs/req HTTP/2 | HTTP/1.1 rps | CPU µs/req HTTP/1.1 | new TLS conn/s | CPU µs/new conn | resumed conn/s | CPU µs/resumed conn | bulk MB/s | KiB/idle TLS HTTP/2 conn |")
    l7.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in ["direct", "kubegate-l7", "kubegate-l7-logged", "kubegate-l7-rules", "kubegate-l7-token", "envoy-l7", "haproxy-l7"]:
        if t not in rows7: continue
        d = rows7[t]
        idle = f"{idle7[t]:.1f}" if t in idle7 else "—"
        l7.append(f"| {t} | {cell(d['rps'], '{:,.0f}')} | {cell(d['p50'], '{:.2f}')} | {cell(d['p99'], '{:.2f}')} | {cell(d['cpu'], '{:.1f}')} | {cell(d['h1rps'], '{:,.0f}')} | {cell(d['h1cpu'], '{:.1f}')} | {cell(d['new'], '{:,.0f}')} | {cell(d['newcpu'], '{:.1f}')} | {cell(d['res'], '{:,.0f}')} | {cell(d['rescpu'], '{:.1f}')} | {cell(d['bulk'], '{:,.0f}')} | {idle} |")
    if reviews7 is not None:
        l7.append("")
        l7.append(f"kubegate-l7-token: every request carried one bearer token; TokenReviews kubegate sent over the whole run: {reviews7}.")
    if watch7:
        l7.append("")
        l7.append("| target | KiB per idle watch | CPU µs per idle watch per second |")
        l7.append("|---|---|---|")
        for t in ["kubegate-l7", "envoy-l7", "haproxy-l7"]:
            if t in watch7:
                l7.append(f"| {t} | {watch7[t][0]:.2f} | {watch7[t][1]:.3f} |")
table7 = "\n".join(l7) if l7 else "(not run: `--only l4`)"

envoy = subprocess.run(["python3", "-c", "import envoy,os;print(os.path.join(os.path.dirname(envoy.__file__),'_bin','envoy'))"], capture_output=True, text=True).stdout.strip()
versions = {
    "kubegate": version(["git", "describe", "--always", "--dirty"]),
    "haproxy": version(["haproxy", "-v"]),
    "nginx": version(["nginx", "-v"]),
    "envoy": version([envoy, "--version"]) if envoy else "not installed",
    "wrk": version(["wrk", "-v"]),
    "h2load": version(["h2load", "--version"]),
}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
machine = f"{os.cpu_count()} cores ({cpu}), {round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB, {platform.platform()}"

report = f"""# Benchmark results

Command: `bench/run.sh`{' --smoke' if smoke else ''}{'' if parts == 'l4 l7' else ' --only ' + parts} ({rounds} interleaved round(s), {duration} per figure, {idle_n} idle connections)
Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}
Machine: {machine}; CPU steal by the hypervisor during the run: {steal}%
Versions: {'; '.join(f'{k} {v}' for k, v in versions.items())}

Medians, with min–max over the rounds (idle memory: first round only, on fresh processes). wrk, the proxy and the backend share the machine, so
requests per second are bounded by it; CPU µs per request (the proxy's utime+stime over the
keep-alive run, divided by requests) is the cleanest comparison. CPU µs/conn: the proxy's CPU
over the `Connection: close` run per connection. Machine µs/req: busy CPU of the whole machine
(wrk and the backend included) per keep-alive request; its excess over `direct` is everything
proxying costs, including kernel work done outside the proxy's process.

{table}

kubegate: startup RSS {int(startup_rss)/1024:.1f} MiB, binary {int(binary)/2**20:.1f} MiB; health checks (one backend, every 1 s) while idle: {checker}.

## Terminate mode (L7)

TLS from the client, HTTP/2 upstream over TLS to an nginx backend answering like an apiserver
(a small JSON object; a 1 MiB JSON list), each proxy in the configuration the failover
load test gives it, one worker each. HTTP/2: `h2load -c 10 -m 10`; HTTP/1.1: `wrk -t1 -c50`
over TLS; new and resumed TLS connections: `openssl s_time -new` / `-reuse` (one client
process, one request per connection); bulk: `h2load -c 8 -m 1` on the list. Idle connections
and watches on fresh processes; watches ask for bookmarks, as informers do.

{table7}
"""
print(report)
if not smoke:
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
    open(out, "w").write(report)
    print(f"written to {out}", file=sys.stderr)
