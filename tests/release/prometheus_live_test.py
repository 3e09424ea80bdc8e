"""A real Prometheus scrapes a live warden with the shipped alert rules
(packaging/prometheus/lmwarden-alerts.yml) and evaluates them every second:
each rule evaluates without an error on the series the warden really
exports, and the rules a warden with no working replica should trip go
pending or fire with the labels the receivers get. alerts_test.py checks the
rules against the docs and runs their unit tests on fed series; this one
checks them against the running program.

The bootstrap unpacks the server from Debian's prometheus package into
build/tools (a prometheus on the PATH is used instead); nothing is installed
or left running. Everything listens on 127.0.0.1.

Run: LMWARDEN_BINARY=build/release/src/lmwarden \\
     python3 -m unittest discover -s tests/release -p '*_test.py' -v
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

BINARY = os.path.abspath(os.environ["LMWARDEN_BINARY"]) if os.environ.get("LMWARDEN_BINARY") else ""
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(REPO, "packaging", "prometheus", "lmwarden-alerts.yml")
PROMETHEUS = shutil.which("prometheus") or os.path.join(REPO, "build", "tools", "prometheus")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read().decode())


def wait_for(what, fn, log_path, seconds=30):
    """fn()'s first truthy value, polled for `seconds`; fails with the log."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except OSError as e:  # not listening yet
            last = e
        time.sleep(0.2)
    with open(log_path) as f:
        raise AssertionError(f"timed out waiting for {what} ({last}):\n{f.read()[-4000:]}")


@unittest.skipUnless(BINARY, "LMWARDEN_BINARY names the binary under test")
@unittest.skipUnless(os.access(PROMETHEUS, os.X_OK), "no prometheus: run scripts/bootstrap.sh")
class LivePrometheus(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lmwarden-prometheus-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.processes = []
        self.addCleanup(self.stop_all)

    def stop_all(self):
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    def start(self, name, argv):
        log_path = os.path.join(self.dir, name + ".log")
        with open(log_path, "w") as log:
            self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                   cwd=self.dir))
        return self.processes[-1], log_path

    def test_the_rules_evaluate_on_a_live_warden_and_trip_as_documented(self):
        # One model whose only server does not listen: out of service at its
        # first probe, so its requests get 503.
        config = os.path.join(self.dir, "lmwarden.yaml")
        backend = f"http://127.0.0.1:{free_port()}"
        good_config = ("listen: 127.0.0.1:0\nthreads: 1\nscrape_interval: 500ms\n"
                       f"models:\n  - name: m\n    backends:\n      - url: {backend}\n")
        with open(config, "w") as f:
            f.write(good_config)
        warden, warden_log = self.start("warden", [BINARY, "serve", "--config", config])

        def warden_port():
            with open(warden_log) as f:
                found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
            return found and int(found.group(1))
        port = wait_for("the warden to listen", warden_port, warden_log, 10)
        base = f"http://127.0.0.1:{port}"
        wait_for("the replica out of service",
                 lambda: not get_json(f"{base}/api/models/m")["replicas"][0]["healthy"], warden_log)

        prometheus_port = free_port()
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    f"rule_files:\n  - {RULES}\n"
                    "scrape_configs:\n  - job_name: lmwarden\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
        _, prometheus_log = self.start("prometheus", [
            PROMETHEUS, "--config.file=prometheus.yml", "--storage.tsdb.path=data",
            f"--web.listen-address=127.0.0.1:{prometheus_port}", "--log.level=warn"])
        api = f"http://127.0.0.1:{prometheus_port}/api/v1"

        def query(expr):
            return get_json(f"{api}/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]
        wait_for("Prometheus to scrape the warden",
                 lambda: [s for s in query('up{job="lmwarden"}') if s["value"][1] == "1"],
                 prometheus_log)

        # A request with no replica to take it: 503, counted.
        request = urllib.request.Request(
            f"{base}/v1/chat/completions", method="POST",
            data=b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
            headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        self.assertEqual(refused.exception.code, 503)

        # A file the next reload refuses.
        with open(config, "w") as f:
            f.write(good_config.replace("threads: 1", "threads: many"))
        warden.send_signal(signal.SIGHUP)

        def alerts():
            return {(a["labels"]["alertname"], a["state"]): a
                    for a in get_json(f"{api}/alerts")["data"]["alerts"]}
        expected = {
            ("LMWardenNoReplicaTakesWork", "pending"): {"model": "m", "severity": "critical"},
            ("LMWardenRequestsRefusedForNoReplica", "firing"): {"model": "m", "severity": "critical"},
            ("LMWardenReloadRefused", "pending"): {"severity": "warning"},
        }
        seen = wait_for("the alerts a warden with no replica trips",
                        lambda: (lambda a: a if set(expected) <= set(a) else None)(alerts()),
                        prometheus_log)
        for key, labels in expected.items():
            with self.subTest(alert=key):
                got = seen[key]["labels"]
                self.assertEqual(got["instance"], f"127.0.0.1:{port}")
                for name, value in labels.items():
                    self.assertEqual(got.get(name), value, got)
                summary = seen[key]["annotations"]["summary"]
                self.assertNotIn("<no value>", summary)
                self.assertIn(f"127.0.0.1:{port}", summary)
        # Nothing else trips: the other rules watch what did not happen here,
        # but for the replica out of service, once a minute's boundary has
        # passed (its average takes one sample a minute).
        out = seen.pop(("LMWardenReplicaOutOfService", "firing"), None)
        if out:
            self.assertEqual((out["labels"]["url"], out["labels"]["rank"]), (backend, "0"), out)
        self.assertEqual(set(seen), set(expected))

        # Every rule evaluated without an error on the live series.
        groups = get_json(f"{api}/rules")["data"]["groups"]
        evaluated = [r for g in groups for r in g["rules"]]
        with open(RULES) as f:
            self.assertEqual(len(evaluated), len(re.findall(r"^\s*- alert:", f.read(), re.M)))
        for rule in evaluated:
            with self.subTest(rule=rule["name"]):
                self.assertEqual(rule["health"], "ok", rule.get("lastError"))
                self.assertIn("lastEvaluation", rule)
                self.assertFalse(rule["lastEvaluation"].startswith("0001-"), "never evaluated")


if __name__ == "__main__":
    unittest.main()
