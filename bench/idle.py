#!/usr/bin/env python3
"""Opens N idle TCP connections to HOST:PORT, reports the proxy's RSS growth per connection.

usage: idle.py PORT N PROXY_PID
Prints: KiB per idle proxied connection (RSS delta / N) as a number.
"""
import socket, sys, time, resource

from rss import rss_kib

port, n, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
before = rss_kib(pid)
socks = []
deadline = time.time() + 60
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    socks.append(s)
    if time.time() > deadline:
        raise SystemExit(f"only {i} connections in 60 s")
# Let the proxy finish connecting upstream and settle.
time.sleep(2)
after = rss_kib(pid)
print(f"{(after - before) / n:.2f}")
for s in socks:
    s.close()
