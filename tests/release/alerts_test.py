"""The Prometheus alerting rules shipped in packaging/prometheus: every
metric they name is one a running warden exports (a `# TYPE` line of its
/metrics, with every optional section configured), every label they group
or match by is one docs/metrics.md gives that metric, every label value they
match is one the docs list and has its series from the start (at 0, so that
increase() sees its first count), and each rule has what Prometheus and a
receiver need. Prometheus's own tool then parses the rules (`promtool check
rules`) and runs their unit tests (`promtool test rules` on
lmwarden-alerts.test.yml: which alerts fire when, with which labels and
annotations); the bootstrap unpacks promtool into build/tools.

Run: LMWARDEN_BINARY=build/release/src/lmwarden \\
     python3 -m unittest discover -s tests/release -p '*_test.py' -v
"""
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.request

import yaml

BINARY = os.environ.get("LMWARDEN_BINARY", "")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(REPO, "packaging", "prometheus", "lmwarden-alerts.yml")
RULE_TESTS = os.path.join(REPO, "packaging", "prometheus", "lmwarden-alerts.test.yml")
# scripts/bootstrap.sh's, unless one is on the PATH.
PROMTOOL = shutil.which("promtool") or os.path.join(REPO, "build", "tools", "promtool")
# Labels Prometheus adds to every series it scrapes, and the one time() has.
TARGET_LABELS = {"instance", "job"}


def documented_metrics():
    """name -> (labels, the row's text), from docs/metrics.md's table."""
    metrics = {}
    with open(os.path.join(REPO, "docs", "metrics.md")) as f:
        for line in f:
            row = re.match(r"\| `(lmwarden_\w+)` \| [^|]+ \| ([^|]+) \| (.*)$", line)
            if row:
                labels = {l.strip() for l in row.group(2).split(",") if l.strip() not in ("", "—")}
                metrics[row.group(1)] = (labels, row.group(3))
    return metrics


def rules():
    with open(RULES) as f:
        document = yaml.safe_load(f)
    return [rule for group in document["groups"] for rule in group["rules"]]


def selectors(expr):
    """(metric, {label: value}) for each metric the expression names."""
    for found in re.finditer(r"(lmwarden_\w+)(\{([^}]*)\})?", expr):
        matchers = dict(re.findall(r'(\w+)\s*=~?\s*"([^"]*)"', found.group(3) or ""))
        yield found.group(1), matchers


def grouping_labels(expr):
    labels = set()
    for found in re.finditer(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels |= {l.strip() for l in found.group(1).split(",") if l.strip()}
    return labels


class AlertRules(unittest.TestCase):
    def test_every_rule_is_complete(self):
        names = set()
        for rule in rules():
            with self.subTest(rule=rule.get("alert")):
                self.assertRegex(rule["alert"], r"^LMWarden[A-Za-z]+$")
                self.assertNotIn(rule["alert"], names, "two rules of one name")
                names.add(rule["alert"])
                self.assertIn(rule["labels"]["severity"], ("warning", "critical"))
                self.assertTrue(rule["annotations"]["summary"])
                if "for" in rule:
                    self.assertRegex(rule["for"], r"^\d+[smh]$")
                expr = rule["expr"]
                self.assertEqual(expr.count("("), expr.count(")"), expr)
                self.assertEqual(expr.count("{"), expr.count("}"), expr)
                for window in re.findall(r"\[([^\]]*)\]", expr):
                    # A range, or a subquery's range and resolution.
                    self.assertRegex(window, r"^\d+[smh](:\d+[smh])?$")
        self.assertGreaterEqual(len(names), 5)

    def test_labels_and_values_are_those_the_metrics_carry(self):
        documented = documented_metrics()
        for rule in rules():
            expr = rule["expr"]
            with self.subTest(rule=rule["alert"]):
                named = list(selectors(expr))
                self.assertTrue(named, "the rule names no lmwarden metric")
                carried = set(TARGET_LABELS)
                for metric, matchers in named:
                    self.assertIn(metric, documented, "not in docs/metrics.md")
                    labels, text = documented[metric]
                    carried |= labels
                    for label, value in matchers.items():
                        self.assertIn(label, labels, f"{metric} has no label {label}")
                        self.assertIn(f"`{value}`", text, f"{metric}: {label}={value} is not documented")
                self.assertLessEqual(grouping_labels(expr), carried, expr)
                # What the annotations show must survive the aggregation.
                shown = set(re.findall(r"\$labels\.(\w+)", str(rule.get("annotations", {}))))
                kept = grouping_labels(expr) if re.search(r"\bby\s*\(", expr) else carried
                self.assertLessEqual(shown, kept, f"annotations use {shown}")

    @unittest.skipUnless(os.access(PROMTOOL, os.X_OK), "no promtool: run scripts/bootstrap.sh")
    def test_prometheus_reads_the_rules(self):
        run = subprocess.run([PROMTOOL, "check", "rules", RULES], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn(f"SUCCESS: {len(rules())} rules found", run.stdout)

    @unittest.skipUnless(os.access(PROMTOOL, os.X_OK), "no promtool: run scripts/bootstrap.sh")
    def test_each_rule_fires_when_its_unit_tests_say(self):
        run = subprocess.run([PROMTOOL, "test", "rules", RULE_TESTS], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        with open(RULE_TESTS) as f:
            tested = {case["alertname"] for test in yaml.safe_load(f)["tests"]
                      for case in test.get("alert_rule_test", [])}
        self.assertEqual(tested, {rule["alert"] for rule in rules()}, "a rule without a test")

    def test_the_unit_tests_feed_series_as_the_warden_exports_them(self):
        documented = documented_metrics()
        with open(RULE_TESTS) as f:
            fed = [series["series"] for test in yaml.safe_load(f)["tests"]
                   for series in test["input_series"]]
        for series in fed:
            with self.subTest(series=series):
                name, labels = re.fullmatch(r"(\w+)\{(.*)\}", series).groups()
                self.assertIn(name, documented)
                given = dict(re.findall(r'(\w+)="([^"]*)"', labels))
                self.assertEqual(set(given), documented[name][0] | TARGET_LABELS)

    @unittest.skipUnless(BINARY, "LMWARDEN_BINARY names the binary under test")
    def test_every_metric_named_is_exported(self):
        with tempfile.TemporaryDirectory(prefix="lmwarden-alerts-") as d:
            config = os.path.join(d, "lmwarden.yaml")
            with open(config, "w") as f:
                # Every optional section on, so that their metrics are there:
                # nothing listens at the backend or the Redis, which the
                # warden only says in its log.
                f.write(f"listen: 127.0.0.1:0\nthreads: 1\naccess_log: {d}/access.log\n"
                        f"saved_homes:\n  path: {d}/homes.json\n"
                        "shared_homes:\n  redis: redis://127.0.0.1:9\n"
                        "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:9\n")
            log_path = os.path.join(d, "out.log")
            with open(log_path, "w") as log:
                process = subprocess.Popen([BINARY, "serve", "--config", config], stdout=log,
                                           stderr=subprocess.STDOUT)
            try:
                port = None
                deadline = time.monotonic() + 10
                while port is None and time.monotonic() < deadline and process.poll() is None:
                    with open(log_path) as f:
                        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
                    port = found and int(found.group(1))
                    time.sleep(0.05)
                if port is None:
                    with open(log_path) as f:
                        self.fail("lmwarden serve did not start:\n" + f.read())
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                    text = reply.read().decode()
                exported = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
            finally:
                process.terminate()
                process.wait(timeout=10)
        for rule in rules():
            for metric, matchers in selectors(rule["expr"]):
                with self.subTest(rule=rule["alert"], metric=metric):
                    self.assertIn(metric, exported)
                    # A series a rule selects by label value is there before
                    # its first count, or increase() would not see that count.
                    if matchers:
                        wanted = [f'{k}="{v}"' for k, v in matchers.items()]
                        series = [l for l in text.splitlines() if l.startswith(metric + "{")]
                        self.assertTrue([l for l in series if all(w in l for w in wanted)],
                                        f"no {metric} series with {wanted} at the start: {series}")


if __name__ == "__main__":
    unittest.main()
