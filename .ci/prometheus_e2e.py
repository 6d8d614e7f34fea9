"""End to end with a real Prometheus server: start the `dump` example's
exporter and Prometheus on loopback, let Prometheus scrape it, and check
through Prometheus's HTTP API that known counters of known groups arrived
with the right values (a live group, the odd-named group, and a group
removed before the first scrape, which must be reported once).

Usage: prometheus_e2e.py PATH_TO_DUMP_EXAMPLE"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

dump = sys.argv[1]
prometheus = shutil.which("prometheus")
if prometheus is None:
    raise SystemExit("prometheus is not installed (Debian package: prometheus)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


tmp = tempfile.mkdtemp(prefix="rstat-e2e-")
procs = []
try:
    exp = subprocess.Popen([dump, "serve", "127.0.0.1:0"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    procs.append(exp)
    line = exp.stdout.readline().strip()
    target = line.removeprefix("listening on http://").removesuffix("/metrics")
    print(f"exporter: {target}")
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: rstat
    static_configs:
      - targets: ['{target}']
""")
    port = free_port()
    prom = subprocess.Popen([prometheus, f"--config.file={cfg}",
                             f"--storage.tsdb.path={tmp}/data",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/prom.log", "w"))
    procs.append(prom)
    api = f"http://127.0.0.1:{port}/api/v1/query?"

    def query(q):
        with urllib.request.urlopen(api + urllib.parse.urlencode({"query": q}), timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]["result"]

    odd = '/tenant-a/quote\\" back\\\\slash\\nnewline \u00e9'
    want = {
        'rstat_io_ops_total{path="/tenant-a"}': 7.0,
        f'rstat_io_ops_total{{path="{odd}"}}': 2.0,
        # Removed before the first scrape: in exactly one scrape, so look
        # back over the whole run.
        'last_over_time(rstat_io_ops_total{path="/tenant-a/removed-before-scrape"}[10m])': 5.0,
        'rstat_memory_max_bytes{path="/tenant-a"}': 1048576.0,
        'up{job="rstat"}': 1.0,
    }
    deadline = time.time() + 60
    got = {}
    while time.time() < deadline and len(got) < len(want):
        for q in want:
            if q in got:
                continue
            try:
                res = query(q)
            except Exception:
                res = []
            if res:
                got[q] = float(res[0]["value"][1])
        time.sleep(0.5)
    bad = {q: (got.get(q), v) for q, v in want.items() if got.get(q) != v}
    if bad:
        print(open(f"{tmp}/prom.log").read()[-3000:])
        raise SystemExit(f"prometheus e2e: wrong or missing (got, want): {bad}")
    n = query('count({job="rstat"})')
    print(f"prometheus e2e: {len(want)} known values arrived through a real Prometheus "
          f"({n[0]['value'][1]} series in its head block)")
finally:
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
