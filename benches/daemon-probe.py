#!/usr/bin/env python3
"""daemon-probe.py BINARY CONFIG MODE [IDLE_SECS]

Starts `BINARY --config CONFIG run` under a private NOTIFY_SOCKET (a unix datagram socket in
a temp dir this script creates), measures, prints key=value lines, then stops the daemon by
its PID (SIGTERM, SIGKILL after 10 s). Nothing outside the temp dir and CONFIG's paths is used.

MODE ready: ready_ms = time from spawn to the READY=1 datagram (config: run_on_start = false).
MODE pass:  pass_ms = time from spawn to the "pass succeeded"/"pass failed" log line on stderr,
            pass_result, rss_kib / hwm_kib (VmRSS / VmHWM from /proc/PID/status once the
            daemon is done with the pass: its next STATUS= saying "last pass: "), then idle_cpu_ms = utime+stime (/proc/PID/stat) spent over IDLE_SECS
            of idle time, and rss_idle_kib at its end (config: run_on_start = true).
"""
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

binary, config, mode = sys.argv[1:4]
idle = float(sys.argv[4]) if len(sys.argv) > 4 else 60.0
TICK = os.sysconf("SC_CLK_TCK")


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def cpu_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # after the ")": state is field 3, utime 14, stime 15 (1-based in proc(5))
    return (int(fields[11]) + int(fields[12])) * 1000.0 / TICK


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


tmp = tempfile.mkdtemp(prefix="certrenewd-notify.")
sock_path = os.path.join(tmp, "notify.sock")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(sock_path)
env = {k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "WATCHDOG_USEC", "WATCHDOG_PID")}
env["NOTIFY_SOCKET"] = sock_path
env.setdefault("CERTRENEWD_LOG", "info")
# Never the machine's buses: a path in our temp dir where nothing listens.
env["DBUS_SYSTEM_BUS_ADDRESS"] = f"unix:path={tmp}/no-system-bus"
env["DBUS_SESSION_BUS_ADDRESS"] = f"unix:path={tmp}/no-session-bus"

proc = None
try:
    t0 = time.monotonic()
    proc = subprocess.Popen([binary, "--config", config, "run"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    stderr_fd = proc.stderr.fileno()
    os.set_blocking(stderr_fd, False)
    buf = b""
    ready_ms = pass_ms = None
    result = None
    settled = False  # the STATUS= that follows the pass line: the daemon is idle again
    deadline = t0 + 1800
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        want_pass = mode == "pass" and not (pass_ms is not None and settled)
        if ready_ms is not None and not want_pass:
            break
        r, _, _ = select.select([sock, stderr_fd], [], [], 1.0)
        now = time.monotonic()
        if sock in r:
            msg = sock.recv(65536).decode(errors="replace")
            lines = msg.split("\n")
            if ready_ms is None and "READY=1" in lines:
                ready_ms = (now - t0) * 1000
                ready_rss = (status_kib(proc.pid, "VmRSS"), status_kib(proc.pid, "RssAnon"))
            if any(
                l.startswith("STATUS=") and "last pass: " in l and "none yet" not in l
                for l in lines
            ):
                settled = True
        if stderr_fd in r:
            chunk = os.read(stderr_fd, 65536)
            buf += chunk
            for key in (b"pass succeeded", b"pass failed"):
                if pass_ms is None and key in buf:
                    pass_ms = (now - t0) * 1000
                    result = key.decode().split()[1]
            buf = buf[-4096:]
    if proc.poll() is not None:
        print(f"error=daemon exited with status {proc.returncode}")
        print("stderr=" + buf.decode(errors="replace").replace("\n", " | ")[-500:])
        sys.exit(1)
    if ready_ms is None:
        print("error=no READY=1 within the deadline")
        sys.exit(1)
    print(f"ready_ms={ready_ms:.1f}")
    print(f"rss_ready_kib={ready_rss[0]}")
    print(f"rss_ready_anon_kib={ready_rss[1]}")
    if mode == "pass":
        if pass_ms is None:
            print("error=no pass line within the deadline")
            sys.exit(1)
        print(f"pass_ms={pass_ms:.1f}")
        print(f"pass_result={result}")
        print(f"rss_kib={status_kib(proc.pid, 'VmRSS')}")
        print(f"hwm_kib={status_kib(proc.pid, 'VmHWM')}")
        print(f"rss_anon_kib={status_kib(proc.pid, 'RssAnon')}")
        print(f"rss_file_kib={status_kib(proc.pid, 'RssFile')}")
        print(f"threads={len(os.listdir(f'/proc/{proc.pid}/task'))}")
        # idle: drain stderr meanwhile so the daemon never blocks on a full pipe
        c0 = cpu_ms(proc.pid)
        end = time.monotonic() + idle
        while time.monotonic() < end:
            r, _, _ = select.select([stderr_fd, sock], [], [], max(0.0, end - time.monotonic()))
            if stderr_fd in r:
                try:
                    os.read(stderr_fd, 65536)
                except BlockingIOError:
                    pass
            if sock in r:
                sock.recv(65536)
        c1 = cpu_ms(proc.pid)
        print(f"idle_secs={idle:g}")
        print(f"idle_cpu_ms={c1 - c0:.0f}")
        print(f"rss_idle_kib={status_kib(proc.pid, 'VmRSS')}")
finally:
    if proc is not None:
        stop(proc)
    sock.close()
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
