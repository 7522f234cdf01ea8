"""What the bench scripts read of a process: its resident set."""


def rss_kib(pid):
    """The resident set of process `pid`, in KiB (`VmRSS` of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("no VmRSS")
