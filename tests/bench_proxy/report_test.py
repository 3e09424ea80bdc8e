"""bench/proxy/report.py on results folders written here, with figures chosen
so that every ratio, best-of pick and target verdict is known in advance.

Run: python3 -m unittest discover -s tests/bench_proxy -p 'report_test.py'
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPORT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "proxy", "report.py")
CASES = ("small", "claude100k", "sse256", "sse256paced")
TARGETS = ("direct", "nginx", "lmwarden")
EVENTS = 256


def wrk_record(requests, p50=100, p99=300, errors=None):
    """One run as wrk.lua writes it: over one second."""
    kinds = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    kinds.update(errors or {})
    return {"requests": requests, "duration_us": 1_000_000, "bytes": requests * 100,
            "errors": kinds, "latency_us": {"p50": p50, "p99": p99}}


def cpu_record(proxy_ticks, user_ticks, responder_ticks, shares, cpu_ids, proxy_switches=None,
               responder_switches=None, proxy_ns=None, responder_ns=None):
    """run.sh's .cpu record at 100 ticks/s over one second; `shares` gives
    each CPU's (busy, idle, steal) ticks, in `cpu_ids`' order. The switch
    counts are left out when None, as records before round 28 have them,
    and so are the scheduler's nanoseconds, as before round 33."""
    after = [t for triple in shares for t in triple]
    record = {"ticks_per_s": 100, "proxy_ticks": proxy_ticks, "proxy_user_ticks": user_ticks,
              "responder_ticks": responder_ticks, "cpu_ids": cpu_ids,
              "cpu_before": [0] * len(after), "cpu_after": after}
    if proxy_switches is not None:
        record["proxy_switches"] = proxy_switches
    if responder_switches is not None:
        record["responder_switches"] = responder_switches
    if proxy_ns is not None:
        record["proxy_ns"], record["responder_ns"] = proxy_ns, responder_ns
    return record


class Results:
    """A results folder: every case, target and mode for each round, with
    defaults that tie the proxies, and per-run overrides."""

    def __init__(self, rounds=1, cpu_ids=(0, 1), shares=((50, 50, 0), (90, 10, 0)), with_cpu=True):
        self.rounds, self.cpu_ids, self.shares, self.with_cpu = rounds, list(cpu_ids), shares, with_cpu
        self.load, self.latency, self.cpu, self.slices = {}, {}, {}, {}

    def set_load(self, case, target, round_, **kw):
        self.load[(case, target, round_)] = kw

    def set_latency(self, case, target, round_, **kw):
        self.latency[(case, target, round_)] = kw

    def set_slices(self, case, target, round_, records):
        """The latency run as one-second slices (run.sh since round 29), one
        wrk_record keyword set each, in order."""
        self.slices[(case, target, round_)] = records

    def set_cpu(self, case, target, round_, **kw):
        self.cpu[(case, target, round_)] = kw

    def write(self, folder):
        for r in range(1, self.rounds + 1):
            for case in CASES:
                for target in TARGETS:
                    stem = os.path.join(folder, f"{r}.{case}.{target}")
                    load = {"requests": 1000, **self.load.get((case, target, r), {})}
                    with open(stem + ".load.json", "w") as f:
                        json.dump(wrk_record(**load), f)
                    proxy_p50 = 100 if target == "direct" else 150
                    latency = {"requests": 50, "p50": proxy_p50, "p99": proxy_p50 * 3,
                               **self.latency.get((case, target, r), {})}
                    if (case, target, r) in self.slices:
                        for k, kw in enumerate(self.slices[(case, target, r)], start=1):
                            with open(f"{stem}.latency-{k}.json", "w") as f:
                                json.dump(wrk_record(**{"requests": 50, **kw}), f)
                    else:
                        with open(stem + ".latency.json", "w") as f:
                            json.dump(wrk_record(**latency), f)
                    if self.with_cpu:
                        cpu = {"proxy_ticks": 0 if target == "direct" else 50, "user_ticks": 20,
                               "responder_ticks": 40, "shares": self.shares, "cpu_ids": self.cpu_ids,
                               **self.cpu.get((case, target, r), {})}
                        with open(stem + ".load.json.cpu", "w") as f:
                            json.dump(cpu_record(**cpu), f)


def run_report(results, *extra):
    """Runs report.py; returns (proxy.json as a dict, what it printed)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "results")
        os.mkdir(folder)
        results.write(folder)
        out = os.path.join(tmp, "proxy.json")
        args = [sys.executable, REPORT, folder, out, "--connections", "16", "--paced-connections", "32",
                "--step-us", "2000", "--seconds", "1", "--latency-seconds", "1",
                "--rounds", str(results.rounds), "--events", str(EVENTS), "--threads", "1",
                "--nginx-version", "1.22.1", "--lmwarden-commit", "abc1234", "--lmwarden-build", "test",
                *extra]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"report.py failed ({done.returncode}):\n{done.stderr}")
        with open(out) as f:
            return json.load(f), done.stdout


def target(summary, case, figure):
    (t,) = [t for t in summary["targets"] if t["case"] == case and t["figure"] == figure]
    return t


class BestOfAndRatios(unittest.TestCase):
    def setUp(self):
        r = Results(rounds=2)
        # small: nginx's best round is the second, lmwarden's the second too.
        r.set_load("small", "nginx", 1, requests=1000)
        r.set_load("small", "nginx", 2, requests=1200)
        r.set_load("small", "lmwarden", 1, requests=1100)
        r.set_load("small", "lmwarden", 2, requests=1150)
        # small's latency: direct 100, nginx adds 50 and lmwarden 55 at best.
        r.set_latency("small", "lmwarden", 1, p50=160)
        r.set_latency("small", "lmwarden", 2, p50=155)
        # Paired within each round: 60 over 50, then (direct at 110 in the
        # second round) 45 over 40.
        r.set_latency("small", "direct", 2, p50=110)
        # claude100k: lmwarden adds 61 against nginx's 50, over 1.2x.
        r.set_latency("claude100k", "lmwarden", 1, p50=161)
        r.set_latency("claude100k", "lmwarden", 2, p50=161)
        # sse256: 998 against 1000 replies/s reads 1.0 to two places, and is
        # still behind.
        r.set_load("sse256", "lmwarden", 1, requests=998)
        r.set_load("sse256", "lmwarden", 2, requests=998)
        # Proxy CPU: lmwarden's lowest round 40 ticks per 1000 requests.
        r.set_cpu("claude100k", "lmwarden", 2, proxy_ticks=40, user_ticks=10)
        self.summary, self.printed = run_report(r)

    def test_best_round_of_each_proxy(self):
        small = self.summary["cases"]["small"]
        self.assertEqual(small["nginx"]["requests_per_s"], 1200.0)
        self.assertEqual(small["lmwarden"]["requests_per_s"], 1150.0)
        self.assertEqual(small["ratio_lmwarden_over_nginx"]["requests_per_s"], 0.96)

    def test_rounds_paired_and_their_median(self):
        paired = self.summary["cases"]["small"]["ratio_per_round"]["requests_per_s"]
        self.assertEqual(paired, [1.1, 0.96])
        self.assertEqual(target(self.summary, "small", "requests/s")["paired_median"], 1.03)
        self.assertEqual(self.summary["cases"]["small"]["ratio_per_round"]["added_p50"], [1.2, 1.12])
        self.assertEqual(target(self.summary, "small", "added p50")["paired_median"], 1.16)
        self.assertRegex(self.printed, r"\n\| small \| 1\.03 \(1\.1, 0\.96\) \|.* \| 1\.16 \(1\.2, 1\.12\) \|\n")
        self.assertIn("| small | added p50 | 1.1 | yes | 1.16 |", self.printed)

    def test_added_latency_over_direct(self):
        small = self.summary["cases"]["small"]
        self.assertEqual(small["nginx"]["added_us_p50"], 50)
        self.assertEqual(small["lmwarden"]["added_us_p50"], 55)
        self.assertEqual(small["ratio_lmwarden_over_nginx"]["added_p50"], 1.1)

    def test_targets_judged_on_the_figures(self):
        self.assertFalse(target(self.summary, "small", "requests/s")["met"])
        self.assertEqual(target(self.summary, "small", "requests/s")["ratio"], 0.958)
        self.assertTrue(target(self.summary, "small", "added p50")["met"])
        self.assertFalse(target(self.summary, "claude100k", "added p50")["met"])
        self.assertTrue(target(self.summary, "claude100k", "requests/s")["met"])  # a tie is met
        sse = target(self.summary, "sse256", "events/s")
        self.assertEqual(sse["ratio"], 0.998)
        self.assertFalse(sse["met"])
        self.assertEqual(self.summary["cases"]["sse256"]["ratio_lmwarden_over_nginx"]["sse_events_per_s"], 1.0)
        self.assertIn("\n3 of 6 met.\n", self.printed)

    def test_sse_events_and_cpu_per_event(self):
        sse = self.summary["cases"]["sse256"]["nginx"]
        self.assertEqual(sse["sse_events_per_s"], 1000 * EVENTS)
        # 50 ticks at 100/s over 1000 requests: 500 µs a request.
        self.assertEqual(sse["proxy_cpu_us_per_request"], 500.0)
        self.assertEqual(sse["proxy_cpu_us_per_event"], round(500 / EVENTS, 3))

    def test_lowest_proxy_cpu_of_the_rounds(self):
        c = self.summary["cases"]["claude100k"]
        self.assertEqual(c["lmwarden"]["proxy_cpu_us_per_request"], 400.0)
        self.assertEqual(c["lmwarden"]["proxy_user_cpu_us_per_request"], 100.0)
        self.assertEqual(c["ratio_lmwarden_over_nginx"]["proxy_cpu_per_request"], 0.8)
        self.assertEqual(c["ratio_per_round"]["proxy_cpu_per_request"], [1.0, 0.8])
        self.assertIsNone(c["direct"]["proxy_cpu_us_per_request"])

    def test_no_warning_without_errors(self):
        self.assertNotIn("WARNING", self.printed)

    def test_cpu_time_from_the_ticks_without_the_schedulers_account(self):
        self.assertEqual(self.summary["setup"]["cpu_time_from"], "ticks")
        self.assertIn("CPU time from ticks;", self.printed)


class LayoutAndCpus(unittest.TestCase):
    """CPUs numbered 2 to 5 (a container's cpuset), wrk on 2, the responder
    on 3, the proxy on 5; CPU 4 carries none of them and is left out."""

    def report(self, shares):
        shares = (*shares[:2], (10, 90, 0), shares[2])  # CPU 4
        r = Results(cpu_ids=(2, 3, 4, 5), shares=shares)
        return run_report(r, "--layout", "separate", "--cpu-wrk", "2", "--cpu-responder", "3",
                          "--cpu-proxy", "5", "--load-cpus", "2,3")

    def test_shares_by_cpu_number(self):
        summary, printed = self.report(((97, 2, 1), (60, 40, 0), (90, 10, 0)))
        nginx = summary["cases"]["small"]["nginx"]
        self.assertEqual(nginx["cpu_busy_share"], {"2": 0.97, "3": 0.6, "5": 0.9})
        self.assertEqual(nginx["cpu_steal_share"], {"2": 0.01, "3": 0.0, "5": 0.0})
        self.assertEqual(summary["setup"]["layout"], "separate")
        self.assertEqual(summary["setup"]["cpu"]["load_side"], [2, 3])
        self.assertIn("separate (wrk on CPU 2, responder on CPU 3, proxy on CPU 5)", printed)
        self.assertIn("| CPU 2 + 3 µs/request |", printed)
        # The load CPUs' busy time: 97 + 60 ticks over 1000 requests.
        self.assertEqual(nginx["load_cpu_us_per_request"], 1570.0)

    def test_load_side_full_from_the_fullest_load_cpu(self):
        summary, printed = self.report(((97, 2, 1), (60, 40, 0), (90, 10, 0)))
        small = target(summary, "small", "requests/s")
        self.assertEqual(small["load_side_share"], [0.98, 0.98])
        self.assertTrue(small["load_side_full"])
        self.assertIn("98% / 98% (load side full)", printed)

    def test_load_side_not_full(self):
        summary, _ = self.report(((80, 20, 0), (60, 40, 0), (99, 1, 0)))
        small = target(summary, "small", "requests/s")
        self.assertEqual(small["load_side_share"], [0.8, 0.8])
        self.assertFalse(small["load_side_full"])

    def test_mixed_names_the_latency_runs_cpu(self):
        r = Results()
        _, printed = run_report(r, "--layout", "mixed", "--cpu-wrk", "0", "--cpu-responder", "1",
                                "--cpu-responder-latency", "0", "--cpu-proxy", "1", "--load-cpus", "0")
        self.assertIn("mixed (wrk on CPU 0, responder on CPU 1, proxy on CPU 1, "
                      "the responder on CPU 0 for the latency runs)", printed)

    def test_spread_names_where_the_latency_runs_pin_each(self):
        r = Results(cpu_ids=(0, 1))
        summary, printed = run_report(r, "--layout", "spread", "--threads", "2", "--cpu-wrk-latency", "0",
                                      "--cpu-responder-latency", "0", "--cpu-proxy-latency", "1")
        self.assertIn("proxies on 2 thread(s), SCHED_OTHER; CPUs: spread (nothing pinned in the throughput runs, "
                      "the latency runs: wrk on CPU 0, responder on CPU 0, proxy on CPU 1)", printed)
        cpu = summary["setup"]["cpu"]
        self.assertEqual((cpu["wrk"], cpu["proxy"], cpu["wrk_latency_runs"], cpu["proxy_latency_runs"]),
                         (None, None, "0", "1"))
        # Nothing pinned in the throughput runs: every CPU's share is shown.
        self.assertEqual(sorted(summary["cases"]["small"]["nginx"]["cpu_busy_share"]), ["0", "1"])


class EdgeCases(unittest.TestCase):
    def test_added_p50_not_judged_when_nginx_added_none(self):
        r = Results()
        r.set_latency("sse256", "nginx", 1, p50=95)  # below direct's 100
        summary, printed = run_report(r)
        added = target(summary, "sse256", "added p50")
        self.assertIsNone(added["ratio"])
        self.assertIsNone(added["met"])
        self.assertIn("not judged: nginx added no latency", printed)
        self.assertIn("\n5 of 5 met (1 not judged).\n", printed)

    def test_errors_warned_with_wrks_timeout(self):
        r = Results()
        r.set_load("claude100k", "lmwarden", 1, errors={"timeout": 3, "status": 2})
        summary, printed = run_report(r, "--wrk-timeout", "7")
        self.assertEqual(summary["cases"]["claude100k"]["lmwarden"]["errors"], 5)
        self.assertEqual(summary["cases"]["claude100k"]["lmwarden"]["error_kinds"], {"timeout": 3, "status": 2})
        self.assertEqual(summary["setup"]["wrk_timeout_s"], 7)
        self.assertIn("WARNING: wrk counted errors", printed)
        self.assertIn("within wrk's --timeout, 7 s", printed)
        self.assertIn("claude100k lmwarden: status 2, timeout 3", printed)

    def test_results_without_cpu_records(self):
        summary, printed = run_report(Results(with_cpu=False))
        small = summary["cases"]["small"]
        self.assertIsNone(small["lmwarden"]["proxy_cpu_us_per_request"])
        self.assertIsNone(small["lmwarden"]["cpu_busy_share"])
        self.assertIsNone(small["ratio_lmwarden_over_nginx"]["proxy_cpu_per_request"])
        self.assertEqual(small["ratio_per_round"]["proxy_cpu_per_request"], [])
        self.assertIn("\n6 of 6 met.\n", printed)


class LatencySlices(unittest.TestCase):
    """A latency run in one-second slices, the targets' taken in turn: each
    percentile is the best slice's, and the rounds pair the slices one by
    one."""

    def setUp(self):
        r = Results(rounds=2)
        for t in TARGETS:
            r.set_slices("sse256", t, 1, [{"p50": 1000, "p99": 1100}] * 4)
        # Round 1: the host's faster level ends during the second slice,
        # after nginx's and before lmwarden's: nginx 1,300 then 2,000;
        # lmwarden 1,280 then 1,990.
        r.set_slices("sse256", "nginx", 1, [{"p50": p, "p99": p + 100} for p in (1300, 1310, 2000, 2100)])
        r.set_slices("sse256", "lmwarden", 1,
                     [{"p50": 1280, "p99": 1350, "errors": {"read": 1}}, {"p50": 1990, "p99": 2100},
                      {"p50": 1990, "p99": 2100, "requests": 20}, {"p50": 2070, "p99": 2200}])
        # Round 2, three slices each.
        for t, p50s in (("direct", (1000, 1200, 900)), ("nginx", (2500, 1900, 1800)),
                        ("lmwarden", (2400, 2200, 1710))):
            r.set_slices("sse256", t, 2, [{"p50": p, "p99": p + 500} for p in p50s])
        self.summary, self.printed = run_report(r)
        self.sse = self.summary["cases"]["sse256"]

    def test_each_percentile_is_the_best_slices(self):
        self.assertEqual(self.sse["direct"]["latency_us_p50"], 900)
        self.assertEqual(self.sse["nginx"]["latency_us_p50"], 1300)
        self.assertEqual(self.sse["lmwarden"]["latency_us_p50"], 1280)
        self.assertEqual(self.sse["lmwarden"]["latency_us_p99"], 1350)
        # Over direct's best (900): 400 and 380.
        self.assertEqual(self.sse["ratio_lmwarden_over_nginx"]["added_p50"], 0.95)

    def test_rounds_pair_their_slices_one_by_one(self):
        # Round 1: 280/300, 990/310, 990/1000, 1070/1100: median 0.98 (of
        # 0.93, 0.97, 0.99 and 3.19). Round 2: 1400/1500, 1000/700, 810/900:
        # median 0.93 (of 0.9, 0.93, 1.43).
        self.assertEqual(self.sse["ratio_per_round"]["added_p50"], [0.98, 0.93])
        self.assertEqual(self.sse["ratio_per_slice"]["added_p50"], [0.93, 3.19, 0.99, 0.97, 0.93, 1.43, 0.9])
        # Judged on the median of all seven.
        added = target(self.summary, "sse256", "added p50")
        self.assertEqual(added["paired_median"], 0.97)
        self.assertEqual(added["judged_on"], "paired slices (7)")
        self.assertIn("| sse256 | added p50 | 0.95 | yes | 0.97 | paired slices (7) |", self.printed)
        self.assertRegex(self.printed, r"\n\| sse256 \|.* \| 0\.97 of 7 slices \(0\.98, 0\.93\) \|\n")

    def test_judged_on_the_paired_slices_not_the_best(self):
        # The host's faster level comes back for nginx's last slice only,
        # after lmwarden's: each one's best slice, 56 against 73 over direct's
        # 25, reads 1.55; slice by slice 0.96, 0.98, 0.96 and 1.55.
        r = Results()
        r.set_slices("small", "direct", 1, [{"p50": 25}] * 4)
        r.set_slices("small", "lmwarden", 1, [{"p50": p} for p in (73, 74, 73, 73)])
        r.set_slices("small", "nginx", 1, [{"p50": p} for p in (75, 75, 75, 56)])
        summary, printed = run_report(r)
        added = target(summary, "small", "added p50")
        self.assertEqual(added["ratio"], 1.548)
        self.assertEqual(added["paired_median"], 0.97)
        self.assertTrue(added["met"])
        self.assertIn("| small | added p50 | 1.548 | yes | 0.97 | paired slices (4) |", printed)
        # Behind in every slice but one: not met, however good its best slice.
        r.set_slices("small", "lmwarden", 1, [{"p50": p} for p in (100, 100, 30, 100)])
        added = target(run_report(r)[0], "small", "added p50")
        self.assertEqual((added["ratio"], added["paired_median"], added["met"]), (0.161, 1.5, False))
        # The other cases' latency in one piece: judged on the best of rounds.
        self.assertEqual(target(summary, "claude100k", "added p50")["judged_on"], "best of rounds")
        self.assertIsNone(summary["cases"]["claude100k"]["ratio_per_slice"]["added_p50"])
        self.assertEqual(self.sse["nginx"]["latency_slices_us_p50"],
                         [[1300, 1310, 2000, 2100], [2500, 1900, 1800]])

    def test_counts_are_the_slices_sums(self):
        self.assertEqual(self.sse["lmwarden"]["errors"], 1)
        self.assertEqual(self.sse["lmwarden"]["error_kinds"], {"read": 1})

    def test_the_header_says_how_latency_was_taken(self):
        self.assertIn("best of 2 × 1s (the best of 1s slices, the targets taken in turn)", self.printed)
        summary, printed = run_report(Results())
        self.assertNotIn("slices", printed)
        self.assertIsNone(summary["cases"]["small"]["nginx"]["latency_slices_us_p50"])


class ContextSwitches(unittest.TestCase):
    def test_per_request_from_the_best_throughput_run(self):
        r = Results(rounds=2)
        # nginx's best sse256 round is the second (1,100 replies), lmwarden's
        # the first (1,050): their switches are the ones reported.
        r.set_load("sse256", "nginx", 2, requests=1100)
        r.set_load("sse256", "lmwarden", 1, requests=1050)
        r.set_cpu("sse256", "nginx", 1, proxy_switches=99_000, responder_switches=99_000)
        r.set_cpu("sse256", "nginx", 2, proxy_switches=27_500, responder_switches=29_700)
        r.set_cpu("sse256", "lmwarden", 1, proxy_switches=31_500, responder_switches=33_600)
        r.set_cpu("sse256", "lmwarden", 2, proxy_switches=1_000, responder_switches=1_000)
        r.set_cpu("sse256", "direct", 1, responder_switches=2_000)
        summary, printed = run_report(r)
        sse = summary["cases"]["sse256"]
        self.assertEqual(sse["nginx"]["proxy_switches_per_request"], 25.0)
        self.assertEqual(sse["nginx"]["responder_switches_per_request"], 27.0)
        self.assertEqual(sse["lmwarden"]["proxy_switches_per_request"], 30.0)
        self.assertEqual(sse["lmwarden"]["responder_switches_per_request"], 32.0)
        self.assertIsNone(sse["direct"]["proxy_switches_per_request"])
        self.assertEqual(sse["direct"]["responder_switches_per_request"], 2.0)
        self.assertIn("Context switches per request", printed)
        self.assertIn("\n| sse256 | 25.0 | 30.0 | 2.0 | 27.0 | 32.0 |\n", printed)

    def test_records_without_switches_leave_the_cells_blank(self):
        summary, printed = run_report(Results())
        small = summary["cases"]["small"]
        self.assertIsNone(small["lmwarden"]["proxy_switches_per_request"])
        self.assertIsNone(small["nginx"]["responder_switches_per_request"])
        self.assertIn("\n| small |  |  |  |  |  |\n", printed)


class CpuTimeFromTheSchedulersAccount(unittest.TestCase):
    """Records with the scheduler's nanoseconds (run.sh since round 33) give
    the CPU figures, whatever the ticks say; the user part keeps the ticks'
    proportion."""

    def setUp(self):
        self.r = Results()
        for case in CASES:
            for t in TARGETS:
                # The ticks say 50 for either proxy (500 µs a request); the
                # scheduler 450 ms for nginx and 300 for lmwarden over 1000 requests.
                ns = {"direct": 0, "nginx": 450_000_000, "lmwarden": 300_000_000}[t]
                self.r.set_cpu(case, t, 1, proxy_ns=ns, responder_ns=200_000_000)

    def test_figures_from_the_nanoseconds(self):
        summary, printed = run_report(self.r)
        c = summary["cases"]["claude100k"]
        self.assertEqual(c["nginx"]["proxy_cpu_us_per_request"], 450.0)
        self.assertEqual(c["lmwarden"]["proxy_cpu_us_per_request"], 300.0)
        # 20 user ticks of 50: 40 % of 300 µs.
        self.assertEqual(c["lmwarden"]["proxy_user_cpu_us_per_request"], 120.0)
        self.assertEqual(c["lmwarden"]["responder_cpu_us_per_request"], 200.0)
        self.assertEqual(c["ratio_lmwarden_over_nginx"]["proxy_cpu_per_request"], 0.67)
        self.assertIsNone(c["direct"]["proxy_cpu_us_per_request"])
        self.assertEqual(summary["setup"]["cpu_time_from"], "schedstat")
        self.assertIn("CPU time from schedstat;", printed)

    def test_a_run_without_them_is_named(self):
        self.r.set_cpu("small", "nginx", 1)  # this run's record has ticks only
        summary, _ = run_report(self.r)
        self.assertEqual(summary["setup"]["cpu_time_from"], "mixed")
        self.assertEqual(summary["cases"]["small"]["nginx"]["proxy_cpu_us_per_request"], 500.0)


if __name__ == "__main__":
    unittest.main()
