"""The optimised binary as `make build` and `make demo` ship it (-O2, no
sanitizer, jemalloc), run as an operator runs it. The other suites test the
sanitizer build, whose allocator is the sanitizer's; what only the shipped
build does is tested here. `make test` builds it and runs these.

Run: LMWARDEN_BINARY=build/release/src/lmwarden \\
     python3 -m unittest discover -s tests/release -p '*_test.py' -v

Everything listens on 127.0.0.1 port 0; every process started is stopped.
"""
import http.client
import http.server
import json
import os
import re
import resource
import socket
import subprocess
import tempfile
import threading
import time
import unittest

BINARY = os.environ.get("LMWARDEN_BINARY", "")

REPLY = json.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 100, "completion_tokens": 2, "total_tokens": 102,
              "prompt_tokens_details": {"cached_tokens": 64}},
}).encode()


class Backend(http.server.ThreadingHTTPServer):
    """A vLLM stand-in: reads each request's body whole and answers a chat
    completion with usage; /health and /metrics answer too."""
    daemon_threads = True
    # A listen backlog as a real server has (uvicorn's is 2048), not Python's
    # 5: with 48 connections opened at once and this process slow to accept
    # them (a loaded machine), the kernel reset the ones its queue had no
    # room for, and the warden answered those requests 502.
    request_queue_size = 128

    def __init__(self):
        super().__init__(("127.0.0.1", 0), BackendHandler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self):
        return self.server_address[1]

    def stop(self):
        self.shutdown()
        self.server_close()


class BackendHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, body, content_type="application/json"):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.answer(b"" if self.path == "/health" else b"# no engines\n", "text/plain")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.answer(REPLY)


class Warden:
    """`lmwarden serve` on one model with one backend; its log in a file.
    `settings` are more top-level lines of its configuration; `max_open_files`
    its open-file limit (soft and hard), when given; `sched_batch` starts it
    under SCHED_BATCH, as `chrt -b 0` would."""

    def __init__(self, backend_port, env=None, settings="", max_open_files=None, threads=1,
                 backend_host="127.0.0.1", sched_batch=False):
        self.dir = tempfile.TemporaryDirectory(prefix="lmwarden-release-")
        config = os.path.join(self.dir.name, "lmwarden.yaml")
        with open(config, "w") as f:
            f.write(f"listen: 127.0.0.1:0\nthreads: {threads}\nscrape_interval: 60s\n{settings}models:\n"
                    f"  - name: m\n    backends:\n      - url: http://{backend_host}:{backend_port}\n")
        self.log_path = os.path.join(self.dir.name, "lmwarden.log")
        self.log = open(self.log_path, "w")
        def limit():
            if max_open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (max_open_files, max_open_files))
            if sched_batch:
                os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        self.process = subprocess.Popen([BINARY, "serve", "--config", config], stdout=self.log,
                                        stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                        preexec_fn=limit)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if found:
                self.port = int(found.group(1))
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError("lmwarden serve did not start:\n" + self.text())

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def cpu_seconds(self):
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def rss_bytes(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def post(self, body):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("POST", "/v1/chat/completions", body=body,
                               headers={"Content-Type": "application/json", "session-id": "s"})
            reply = connection.getresponse()
            return reply.status, reply.read()
        finally:
            connection.close()

    def get(self, path):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", path)
            reply = connection.getresponse()
            return reply.status, reply.read().decode()
        finally:
            connection.close()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        self.dir.cleanup()


KCMP_FILES = 2


def same_table(a, b):
    """Whether threads a and b share one descriptor table (kcmp); None where
    the kernel will not say."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(312, a, b, KCMP_FILES, 0, 0)  # SYS_kcmp on x86-64
    return None if result < 0 else result == 0


def chat_body(filler_bytes=0):
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * filler_bytes}]}).encode()


@unittest.skipUnless(BINARY, "LMWARDEN_BINARY names the binary under test")
class ReleaseBinary(unittest.TestCase):
    def setUp(self):
        self.backend = Backend()
        self.addCleanup(self.backend.stop)

    def start(self, env=None, **options):
        warden = Warden(self.backend.port, env, **options)
        self.addCleanup(warden.stop)
        return warden

    def test_out_of_descriptors_it_backs_off_then_serves_again(self):
        # The sanitizer build cannot run this under ASan + UBSan (UBSan's own
        # probe needs a descriptor), so the shipped build is where it runs in
        # `make test`.
        warden = self.start(settings="timeouts:\n  client_read: 30s\n", max_open_files=64)
        self.assertEqual(warden.get("/health")[0], 200)
        # Far more connections than it has descriptors: the first are accepted
        # and held (nothing is sent; the read timeout is long), the rest wait
        # in the listening socket's backlog.
        hogs = [socket.create_connection(("127.0.0.1", warden.port), timeout=5) for _ in range(256)]
        try:
            deadline = time.monotonic() + 10
            while "accept failed" not in warden.text() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertIn("accept failed", warden.text(), "the warden never ran out of descriptors")
            # Out of descriptors, it backs off rather than retrying accept in a
            # tight loop.
            before = warden.cpu_seconds()
            time.sleep(2)
            used = warden.cpu_seconds() - before
            self.assertLess(used, 0.5, f"{used:.2f} s of CPU in 2 s while out of descriptors")
            self.assertIsNone(warden.process.poll(), warden.text())
        finally:
            for hog in hogs:
                hog.close()
        # Once they are gone it answers again, a forwarded request included.
        deadline = time.monotonic() + 15
        answered = None
        while time.monotonic() < deadline:
            try:
                answered = warden.post(chat_body())
                if answered[0] == 200:
                    break
            except OSError as e:
                answered = e
            time.sleep(0.2)
        self.assertEqual(answered, (200, REPLY), warden.text()[-4000:])
        warden.process.terminate()
        self.assertEqual(warden.process.wait(timeout=10), 0, warden.text()[-4000:])

    def test_a_backend_named_by_hostname_leaves_each_io_thread_the_only_user_of_its_table(self):
        # A name is looked up on a thread of its own, started from the I/O
        # thread that asks: it shares that thread's table while it runs and
        # ends with its lookup, after which the I/O thread is again the only
        # user of its table.
        if os.uname().machine != "x86_64":
            self.skipTest("the kcmp system call number used here is x86-64's")
        warden = self.start(threads=2, backend_host="localhost")
        if "share the process's descriptor table" in warden.text():
            self.skipTest("the I/O threads share the table here: " + warden.text())
        for _ in range(4):  # both threads get a request (round robin)
            self.assertEqual(warden.post(chat_body())[0], 200, warden.text())
        pid = warden.process.pid
        if same_table(pid, pid) is None:
            self.skipTest("kcmp cannot compare descriptor tables here")

        def look():
            tasks = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            # A thread gone meanwhile compares as None: neither kind.
            io_threads = [t for t in tasks if same_table(pid, t) is False]
            sharing = [f"thread {other} shares I/O thread {t}'s table"
                       for t in io_threads for other in tasks
                       if other != t and same_table(t, other)]
            return io_threads, sharing

        deadline = time.monotonic() + 10
        io_threads, sharing = look()
        while sharing and time.monotonic() < deadline:
            time.sleep(0.05)
            io_threads, sharing = look()
        self.assertEqual(len(io_threads), 2, f"threads with a table of their own: {io_threads}")
        self.assertEqual(sharing, [])

    def test_it_names_the_scheduling_policy_it_inherits(self):
        # The warden keeps the policy it is started with, on every thread, and
        # says which; under SCHED_BATCH it warns, since a woken I/O thread
        # then waits for a busy CPU's tick.
        plain = self.start()
        if os.sched_getscheduler(0) == os.SCHED_OTHER:
            self.assertRegex(plain.text(), r"\[info\] scheduling policy: SCHED_OTHER, nice -?\d+\n")
        self.assertNotIn("does not preempt", plain.text())
        batch = self.start(threads=2, sched_batch=True)
        self.assertRegex(batch.text(), r"\[warning\] scheduling policy: SCHED_BATCH, nice -?\d+: a woken "
                                       r"I/O thread does not preempt a busy CPU's task")
        self.assertEqual(batch.post(chat_body())[0], 200, batch.text())
        pid = batch.process.pid
        tasks = os.listdir(f"/proc/{pid}/task")
        self.assertGreaterEqual(len(tasks), 3)  # the main thread and two I/O threads at least
        for task in tasks:
            self.assertEqual(os.sched_getscheduler(int(task)), os.SCHED_BATCH, f"thread {task}")

    def test_a_request_goes_through_and_its_usage_is_booked(self):
        warden = self.start()
        self.assertIn("memory allocator: jemalloc", warden.text(),
                      "the shipped build runs on jemalloc (LMWARDEN_ALLOCATOR=auto)")
        status, body = warden.post(chat_body())
        self.assertEqual(status, 200, body)
        self.assertEqual(body, REPLY)
        status, metrics = warden.get("/metrics")
        self.assertEqual(status, 200)
        self.assertRegex(metrics, r'lmwarden_prompt_tokens_total\{[^}]*source="cached"[^}]*\} 64\b')
        self.assertRegex(metrics, r'lmwarden_prompt_tokens_total\{[^}]*source="computed"[^}]*\} 36\b')

    def test_the_memory_of_a_burst_of_large_bodies_goes_back_once_idle(self):
        # The decay time shortened so that the test waits seconds, not tens of
        # them; the thread that purges on time is the binary's own setting.
        # Without it, nothing allocates once the burst is over, and the pages
        # stay resident however long the warden idles.
        warden = self.start({"MALLOC_CONF": "dirty_decay_ms:1000"})
        self.assertIn("freed memory returned after 1000 ms unused", warden.text())
        self.assertNotIn("checked only as the process allocates", warden.text())
        self.assertEqual(warden.post(chat_body())[0], 200)
        baseline = warden.rss_bytes()

        big = chat_body(1 << 20)
        failures = []

        def client():
            for _ in range(3):
                status, _ = warden.post(big)
                if status != 200:
                    failures.append(status)

        clients = [threading.Thread(target=client) for _ in range(48)]
        for t in clients:
            t.start()
        peak = baseline
        while any(t.is_alive() for t in clients):
            peak = max(peak, warden.rss_bytes())
            time.sleep(0.02)
        for t in clients:
            t.join()
        peak = max(peak, warden.rss_bytes())
        self.assertEqual(failures, [])
        self.assertGreater(peak - baseline, 24 << 20,
                           f"the burst should have taken memory: {baseline >> 20} MiB -> {peak >> 20} MiB")

        # Idle from here: no request, no allocation to trigger a purge.
        settled = baseline + (peak - baseline) // 4
        deadline = time.monotonic() + 20
        rss = warden.rss_bytes()
        while rss > settled and time.monotonic() < deadline:
            time.sleep(0.25)
            rss = warden.rss_bytes()
        self.assertLessEqual(rss, settled,
                             f"resident {rss >> 20} MiB 20 s after a burst (baseline {baseline >> 20} MiB, "
                             f"peak {peak >> 20} MiB)")


if __name__ == "__main__":
    unittest.main()
