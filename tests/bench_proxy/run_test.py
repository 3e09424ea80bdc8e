"""bench/proxy/run.sh as an operator runs it: its checks of the settings, and
one short run of the whole benchmark (responder, nginx, lmwarden, wrk on
127.0.0.1) against the binaries named by LMWARDEN_BINARY and BENCH_RESPONDER.

Run: LMWARDEN_BINARY=... BENCH_RESPONDER=... LMWARDEN_FIXTURES=... \\
     python3 -m unittest discover -s tests/bench_proxy -p 'run_test.py'
"""
import json
import os
import re
import subprocess
import tempfile
import unittest

RUN = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..", "bench", "proxy", "run.sh"))
TRAIN = os.path.join(os.path.dirname(RUN), "train.sh")
CASES = ("small", "claude100k", "sse256", "sse256paced")


def run_sh(env, cpus=None, timeout=60):
    """Runs run.sh with `env` added to this environment, on the given CPUs
    (default: this process's); returns the finished process."""
    full = {**os.environ, **env}
    preexec = (lambda: os.sched_setaffinity(0, cpus)) if cpus is not None else None
    return subprocess.run(["bash", RUN], env=full, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec)


class SettingsChecked(unittest.TestCase):
    """A bad setting stops the run at once, with exit status 2 and a message
    naming it, before anything is installed or started."""

    def assert_refused(self, done, message):
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(message, done.stderr)
        self.assertEqual(done.stdout, "")  # nothing installed, nothing started

    def test_unknown_layout(self):
        self.assert_refused(run_sh({"BENCH_LAYOUT": "bogus"}),
                            "bench-proxy: BENCH_LAYOUT=bogus: use auto, separate, shared-load, "
                            "shared-proxy, mixed, spread or none")

    def test_numbers(self):
        for knob, value in (("BENCH_SECONDS", "6s"), ("BENCH_ROUNDS", "0"), ("BENCH_CONNECTIONS", "x"),
                            ("BENCH_PROXY_THREADS", "-1"), ("BENCH_STEP_US", "2e3")):
            with self.subTest(knob=knob, value=value):
                self.assert_refused(run_sh({knob: value}),
                                    f"bench-proxy: {knob}={value}: expected a whole number above 0")

    def test_unknown_scheduling_policy(self):
        self.assert_refused(run_sh({"BENCH_SCHED": "fifo"}),
                            "bench-proxy: BENCH_SCHED=fifo: use other or batch")

    def test_a_layout_that_pins_each_proxy_to_one_cpu_refuses_several_threads(self):
        for layout in ("separate", "shared-load", "shared-proxy", "mixed"):
            with self.subTest(layout=layout):
                self.assert_refused(run_sh({"BENCH_LAYOUT": layout, "BENCH_PROXY_THREADS": "2"}),
                                    f"bench-proxy: BENCH_LAYOUT={layout} pins each proxy to one CPU; "
                                    "with BENCH_PROXY_THREADS=2 use spread or none")

    def test_layout_needs_more_cpus_than_allowed(self):
        allowed = sorted(os.sched_getaffinity(0))
        for layout, need in (("separate", 3), ("shared-proxy", 2), ("mixed", 2), ("shared-load", 2),
                             ("spread", 2)):
            with self.subTest(layout=layout):
                # The CPUs given are the last ones allowed, so the message must
                # count CPUs, not assume they start at 0.
                cpus = allowed[-(need - 1):]
                self.assert_refused(run_sh({"BENCH_LAYOUT": layout}, cpus=cpus),
                                    f"BENCH_LAYOUT={layout} needs {need} CPUs; this process may use {need - 1}")


@unittest.skipUnless(os.environ.get("LMWARDEN_BINARY") and os.environ.get("BENCH_RESPONDER"),
                     "needs LMWARDEN_BINARY and BENCH_RESPONDER (ctest sets them)")
class ShortRun(unittest.TestCase):
    """One round of one second per case and target: every case answered
    through both proxies without an error, a report with the targets, and
    nothing left behind."""

    threads = 1
    sched = None  # BENCH_SCHED; None: not set, the default

    @classmethod
    def expected_layout(cls):
        cpus = len(os.sched_getaffinity(0))
        if cls.threads > 1:
            return "spread" if cpus >= 2 else "none"
        return "separate" if cpus >= 3 else "mixed" if cpus == 2 else "none"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.work_parent = os.path.join(cls.tmp.name, "work")
        cls.out = os.path.join(cls.tmp.name, "out")
        os.mkdir(cls.work_parent)
        env = {"BENCH_SECONDS": "1", "BENCH_LATENCY_SECONDS": "2", "BENCH_ROUNDS": "1",
               "BENCH_STEP_US": "200", "BENCH_PROXY_THREADS": str(cls.threads),
               "BENCH_OUT": cls.out, "TMPDIR": cls.work_parent}
        if cls.sched is not None:
            env["BENCH_SCHED"] = cls.sched
        cls.done = run_sh(env, timeout=240)
        cls.summary = None
        if cls.done.returncode == 0:
            with open(os.path.join(cls.out, "proxy.json")) as f:
                cls.summary = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.assertEqual(self.done.returncode, 0, self.done.stdout + self.done.stderr)

    def test_every_case_through_every_target(self):
        for case in CASES:
            for target in ("direct", "nginx", "lmwarden"):
                with self.subTest(case=case, target=target):
                    t = self.summary["cases"][case][target]
                    self.assertGreater(t["requests_per_s"], 0)
                    self.assertEqual(t["errors"], 0, t["error_kinds"])
                    self.assertGreater(t["latency_us_p50"], 0)

    def test_latency_in_slices_taken_in_turn(self):
        # BENCH_LATENCY_SECONDS=2: two one-second slices per target, each
        # with replies of its own.
        for case in CASES:
            for target in ("direct", "nginx", "lmwarden"):
                with self.subTest(case=case, target=target):
                    (slices,) = self.summary["cases"][case][target]["latency_slices_us_p50"]
                    self.assertEqual(len(slices), 2)
                    self.assertTrue(all(p50 > 0 for p50 in slices), slices)
        self.assertIn("(the best of 1s slices, the targets taken in turn)", self.done.stdout)
        self.assertIn("+ 2s (c=1, in 1s slices taken in turn) per case and target", self.done.stdout)

    def test_context_switches_counted(self):
        # Every streamed reply makes each proxy wait for the responder's
        # events at least once, and the responder for the next request.
        sse = self.summary["cases"]["sse256"]
        for proxy in ("nginx", "lmwarden"):
            self.assertGreater(sse[proxy]["proxy_switches_per_request"], 0)
        for target in ("direct", "nginx", "lmwarden"):
            self.assertGreater(sse[target]["responder_switches_per_request"], 0)
        self.assertIsNone(sse["direct"]["proxy_switches_per_request"])
        self.assertIn("Context switches per request", self.done.stdout)

    def test_cpu_time_from_the_schedulers_account(self):
        # This kernel has schedstat, so every run's record has it, and the
        # proxies' CPU per request comes from it.
        if not os.access("/proc/self/schedstat", os.R_OK):
            self.skipTest("no /proc/self/schedstat on this kernel")
        self.assertEqual(self.summary["setup"]["cpu_time_from"], "schedstat")
        for case in CASES:
            for proxy in ("nginx", "lmwarden"):
                with self.subTest(case=case, proxy=proxy):
                    self.assertGreater(self.summary["cases"][case][proxy]["proxy_cpu_us_per_request"], 0)

    def test_replies_are_the_cases(self):
        cases = self.summary["cases"]
        # Through either proxy the client gets the responder's reply.
        for case in CASES:
            direct = cases[case]["direct"]["bytes_per_reply"]
            for proxy in ("nginx", "lmwarden"):
                with self.subTest(case=case, proxy=proxy):
                    self.assertAlmostEqual(cases[case][proxy]["bytes_per_reply"], direct, delta=direct * 0.5)
        # 256 events make an SSE reply tens of times a JSON one.
        self.assertGreater(cases["sse256"]["direct"]["bytes_per_reply"],
                           20 * cases["small"]["direct"]["bytes_per_reply"])

    def test_layout_as_resolved_for_this_host(self):
        expected = self.expected_layout()
        setup = self.summary["setup"]
        self.assertEqual(setup["layout"], expected)
        self.assertEqual(setup["proxy_threads"], self.threads)
        self.assertEqual(setup["rounds"], 1)
        self.assertEqual(setup["wrk_timeout_s"], 10)
        self.assertIn(f"CPUs: {expected} (", self.done.stdout)

    def test_scheduling_policy(self):
        # run.sh reads every proxy thread's policy back from /proc after it
        # sets SCHED_BATCH, and stops if one is not (the run passed setUp).
        expected = "SCHED_BATCH" if self.sched == "batch" else "SCHED_OTHER"
        self.assertEqual(self.summary["setup"]["proxy_sched_policy"], expected)
        self.assertIn(f"both proxies' threads {expected}", self.done.stdout)
        self.assertIn(f"thread(s), {expected}; CPUs:", self.done.stdout)

    def test_report_against_the_targets(self):
        self.assertEqual([(t["case"], t["figure"]) for t in self.summary["targets"]],
                         [("small", "requests/s"), ("small", "added p50"),
                          ("claude100k", "requests/s"), ("claude100k", "added p50"),
                          ("sse256", "events/s"), ("sse256", "added p50")])
        self.assertRegex(self.done.stdout, r"\n\d of \d met")
        self.assertNotIn("WARNING", self.done.stdout)

    def test_nothing_left_behind(self):
        self.assertEqual(os.listdir(self.work_parent), [])  # the work folder removed
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            self.assertNotIn(self.work_parent, cmdline, f"process {pid} still runs: {cmdline}")
        self.assertTrue(re.search(r"saved .*proxy\.json", self.done.stdout))


class ShortRunOfTwoThreads(ShortRun):
    """The same with two nginx workers and two warden threads: on two CPUs or
    more the spread layout, which moves every process between the throughput
    and the latency runs; and every proxy thread under SCHED_BATCH."""
    threads = 2
    sched = "batch"

    def test_each_proxy_serves_on_two_threads(self):
        self.assertIn("proxies on 2 thread(s)", self.done.stdout)
        if self.expected_layout() == "spread":
            self.assertIn("the latency runs: wrk on CPU", self.done.stdout)


@unittest.skipUnless(os.environ.get("LMWARDEN_BINARY") and os.environ.get("BENCH_RESPONDER"),
                     "needs LMWARDEN_BINARY and BENCH_RESPONDER (ctest sets them)")
class TrainingSaysWhatElseRan(unittest.TestCase):
    """train.sh, the profile-guided build's training load, says how much of
    a CPU other work took while it ran: here a process spinning beside it,
    which is none of the training's own."""

    def test_a_spinning_process_is_counted_as_other_work(self):
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "training.txt")
            spinner = subprocess.Popen(["python3", "-c", "while True: pass"])
            try:
                done = subprocess.run(
                    ["bash", TRAIN, os.environ["LMWARDEN_BINARY"], os.environ["BENCH_RESPONDER"]],
                    env={**os.environ, "PGO_TRAIN_SECONDS": "1", "PGO_TRAIN_REPORT": report,
                         "TMPDIR": tmp},
                    capture_output=True, text=True, timeout=120)
            finally:
                spinner.kill()
                spinner.wait()
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            with open(report) as f:
                other = int(f.read())
            # One spinning process on this machine's two CPUs or more: most of
            # one CPU whenever the training's own processes leave room.
            self.assertGreaterEqual(other, 25, done.stdout)
            self.assertIn(f"other work took {other}% of a CPU while the profile was made", done.stdout)
            self.assertIn("warning: a profile made beside other work", done.stderr)
            self.assertEqual(os.listdir(tmp), ["training.txt"])  # its work folder removed


if __name__ == "__main__":
    unittest.main()
