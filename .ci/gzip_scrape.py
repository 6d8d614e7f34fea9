"""Scrape an exporter as Prometheus does, asking for gzip: the answer must
be gzip-compressed (Content-Encoding: gzip, Content-Length the compressed
size). The OpenMetrics answer, decompressed, goes through the official
Python client's parser; the classic text answer, decompressed, is printed
for `promtool check metrics`.

Usage: gzip_scrape.py METRICS_URL | promtool check metrics"""
import gzip
import sys
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families

url = sys.argv[1]


def scrape(accept):
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip", "Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as r:
        raw = r.read()
        enc = r.headers.get("Content-Encoding")
        length = int(r.headers["Content-Length"])
    if enc != "gzip":
        raise SystemExit(f"asked for gzip, got Content-Encoding {enc!r}")
    if length != len(raw):
        raise SystemExit(f"Content-Length {length} but {len(raw)} bytes arrived")
    text = gzip.decompress(raw).decode()
    return raw, text


raw, om = scrape("application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
families = list(text_string_to_metric_families(om))
samples = sum(len(f.samples) for f in families)
if not om.endswith("# EOF\n") or samples == 0:
    raise SystemExit("the decompressed OpenMetrics scrape is incomplete")
print(f"gzip scrape: {len(raw)} bytes for {len(om)} of OpenMetrics, "
      f"{len(families)} families, {samples} samples parsed", file=sys.stderr)
_, classic = scrape("text/plain")
sys.stdout.write(classic)
