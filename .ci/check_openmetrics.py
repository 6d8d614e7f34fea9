"""Parse OpenMetrics text (stdin) with the official Python client's parser
and check known values of the `dump` example's tree, including a label
value with a quote, a backslash, a newline and a non-ASCII letter."""
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

text = sys.stdin.read()
families = {f.name: f for f in text_string_to_metric_families(text)}
odd = '/tenant-a/quote" back\\slash\nnewline \u00e9'


def value(family, **labels):
    for s in families[family].samples:
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise SystemExit(f"no sample of {family} with {labels}")


checks = [
    (value("rstat_io_ops", path=odd), 2),
    (value("rstat_io_ops", path="/tenant-a"), 7),
    (value("rstat_io_ops", path="/tenant-a/removed-before-scrape"), 5),
    (value("rstat_io_read_bytes", path=odd), 8192),
    (value("rstat_cpu_usage_seconds", path=odd), 0.002),
    (value("rstat_memory_max_bytes", path="/tenant-a"), 1048576),
    (value("rstat_memory_events", path="/tenant-a", event="oom"), 1),
]
assert families["rstat_cpu_usage_seconds"].type == "counter"
assert families["rstat_cpu_usage_seconds"].unit == "seconds"
assert families["rstat_memory_current_bytes"].type == "gauge"
for got, want in checks:
    if abs(got - want) > 1e-9:
        raise SystemExit(f"got {got}, want {want}")
n = sum(len(f.samples) for f in families.values())
print(f"openmetrics: {len(families)} families, {n} samples parsed, {len(checks)} known values match")
