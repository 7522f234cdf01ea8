#!/usr/bin/env python3
"""Idle TLS HTTP/2 connections and idle watches through a proxy, and what they cost it.

usage: h2idle.py conns PORT N PROXY_PID
    N TLS connections with ALPN h2, one GET each (answered 200), then left idle.
    Prints: KiB of proxy RSS per idle connection.
usage: h2idle.py watches PORT N PROXY_PID PKI SECONDS
    N watches (100 streams per connection, the admin client certificate of PKI), each
    answered 200 and left open; then the proxy's CPU over SECONDS while they stay idle.
    Prints: "KiB-per-watch cpu-us-per-watch-per-second".
"""
import os
import socket
import ssl
import sys
import time
import resource

import h2.config
import h2.connection
import h2.events

from rss import rss_kib

STREAMS_PER_CONNECTION = 100
SMALL = "/api/v1/namespaces/default/configmaps/small"
WATCH = "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=3600"


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Conn:
    """One TLS HTTP/2 connection and the streams opened on it."""

    def __init__(self, port, context):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname="kubernetes")
        if self.sock.selected_alpn_protocol() != "h2":
            raise SystemExit(f"ALPN: {self.sock.selected_alpn_protocol()}")
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.h2.initiate_connection()
        self.flush()
        self.status = {}

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def get(self, path):
        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(
            sid,
            [(":method", "GET"), (":scheme", "https"), (":authority", "kubernetes"),
             (":path", path), ("accept", "application/json")],
            end_stream=True,
        )
        self.flush()
        return sid

    def wait_status(self, sids, deadline):
        """Reads until every stream in sids has its response status."""
        while any(s not in self.status for s in sids):
            if time.time() > deadline:
                raise SystemExit(f"no answer on {len(set(sids) - set(self.status))} streams")
            data = self.sock.recv(65536)
            if not data:
                raise SystemExit("connection closed")
            for ev in self.h2.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    self.status[ev.stream_id] = dict(ev.headers)[":status"]
                elif isinstance(ev, h2.events.DataReceived):
                    self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            self.flush()
        bad = [self.status[s] for s in sids if self.status[s] != "200"]
        if bad:
            raise SystemExit(f"answered {bad[0]} ({len(bad)} of {len(sids)})")


def context(pki=None):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    if pki:
        ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
    return ctx


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    mode, port, n, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    deadline = time.time() + 120
    if mode == "conns":
        ctx = context()
        before = rss_kib(pid)
        conns = []
        for _ in range(n):
            c = Conn(port, ctx)
            c.wait_status([c.get(SMALL)], deadline)
            conns.append(c)
        time.sleep(2)
        print(f"{(rss_kib(pid) - before) / n:.2f}")
    elif mode == "watches":
        pki, seconds = sys.argv[5], float(sys.argv[6])
        ctx = context(pki)
        before = rss_kib(pid)
        conns = []
        left = n
        while left > 0:
            c = Conn(port, ctx)
            k = min(STREAMS_PER_CONNECTION, left)
            c.wait_status([c.get(WATCH) for _ in range(k)], deadline)
            conns.append(c)
            left -= k
        time.sleep(2)
        kib = (rss_kib(pid) - before) / n
        # Idle: keep reading (bookmarks, pings) so flow control never stalls a stream.
        t0, c0 = time.time(), cpu_ticks(pid)
        end = t0 + seconds
        for c in conns:
            c.sock.setblocking(False)
        while time.time() < end:
            for c in conns:
                try:
                    data = c.sock.recv(65536)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                if not data:
                    raise SystemExit("a watch connection closed")
                for ev in c.h2.receive_data(data):
                    if isinstance(ev, h2.events.DataReceived):
                        c.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    elif isinstance(ev, h2.events.StreamEnded):
                        raise SystemExit("a watch ended")
                c.flush()
            time.sleep(0.05)
        cpu_us = (cpu_ticks(pid) - c0) * 1e6 / os.sysconf("SC_CLK_TCK")
        print(f"{kib:.2f} {cpu_us / n / (time.time() - t0):.3f}")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
