"""Socket activation (sd_listen_fds(3)), as systemd does it for
packaging/lmwarden.socket: this test holds the listening socket, as systemd
would, and starts `lmwarden serve` with it as descriptor 3, LISTEN_FDS=1 and
LISTEN_PID set to the warden's own process id (a shell that sets it to `$$`
and execs the warden). A restart then refuses no connection: one made while
no warden runs waits in the socket for the next.

Run: LMWARDEN_BINARY=build/release/src/lmwarden \\
     python3 -m unittest discover -s tests/release -p '*_test.py' -v

Everything listens on 127.0.0.1, port 0 where the test binds.
"""
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

BINARY = os.environ.get("LMWARDEN_BINARY", "")
# Sets what systemd sets, for the process the shell becomes.
AS_SYSTEMD = 'export LISTEN_PID=$$ LISTEN_FDS="$LMWARDEN_TEST_FDS"; exec "$@"'


@unittest.skipUnless(BINARY, "LMWARDEN_BINARY names the binary under test")
class SocketActivation(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="lmwarden-socket-")
        self.addCleanup(self.dir.cleanup)
        self.config = os.path.join(self.dir.name, "lmwarden.yaml")
        # A listen address the warden must not use while it is passed one:
        # port 1 would need privileges, and nothing listens there after.
        self.write_config("127.0.0.1:1")
        self.log_path = os.path.join(self.dir.name, "out.log")
        self.listener = socket.socket()
        self.addCleanup(self.listener.close)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]

    def write_config(self, listen):
        with open(self.config, "w") as f:
            f.write(f"listen: {listen}\nthreads: 2\nmodels:\n  - name: m\n    backends:\n"
                    "      - url: http://127.0.0.1:9\n")

    def start(self, passed, count="1", shell=AS_SYSTEMD):
        """The warden, with `passed` (a descriptor) as its descriptor 3."""
        log = open(self.log_path, "a")
        self.addCleanup(log.close)
        process = subprocess.Popen(
            ["sh", "-c", shell, "sh", BINARY, "serve", "--config", self.config],
            pass_fds=(passed, 3) if passed != 3 else (3,), preexec_fn=lambda: os.dup2(passed, 3),
            env={**os.environ, "LMWARDEN_TEST_FDS": count}, stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: process.poll() is None and (process.kill(), process.wait()))
        return process

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_listening(self, process, times=1):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and process.poll() is None:
            said = re.findall(r"lmwarden listening on http://127\.0\.0\.1:(\d+)", self.log())
            if len(said) >= times:
                return int(said[-1])
            time.sleep(0.05)
        self.fail("the warden did not start:\n" + self.log())

    def stop(self, process):
        process.send_signal(signal.SIGTERM)
        self.assertEqual(process.wait(timeout=30), 0, self.log())

    def test_serves_the_passed_socket_and_a_restart_refuses_no_connection(self):
        first = self.start(self.listener.fileno())
        self.assertEqual(self.wait_listening(first), self.port)
        self.assertIn("the listening socket is the service manager's (socket activation)", self.log())
        self.assertIn("listen 127.0.0.1:1 is not used", self.log())
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as reply:
            self.assertEqual(reply.status, 200)
        self.stop(first)

        # No warden runs: the connection waits in the socket, with its request.
        client = socket.create_connection(("127.0.0.1", self.port), timeout=15)
        self.addCleanup(client.close)
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: warden\r\nConnection: close\r\n\r\n")
        second = self.start(self.listener.fileno())
        self.assertEqual(self.wait_listening(second, times=2), self.port)
        reply = b""
        while chunk := client.recv(65536):
            reply += chunk
        self.assertTrue(reply.startswith(b"HTTP/1.1 200 OK\r\n"), reply[:200])
        self.assertIn(b"lmwarden_requests_total", reply)
        self.stop(second)

    def test_a_reload_keeps_the_passed_socket(self):
        process = self.start(self.listener.fileno())
        self.wait_listening(process)
        # Another listen in the file: not a change a restart would need, since
        # the socket is the service manager's.
        self.write_config("127.0.0.1:2")
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "reloaded" not in self.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn(f"reloaded {self.config}", self.log())
        self.assertNotRegex(self.log(), r"reload: .*listen", "the reload saw a listen change")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as reply:
            self.assertEqual(reply.status, 200)
        self.stop(process)

    def refused(self, passed, count="1"):
        process = self.start(passed, count)
        self.assertEqual(process.wait(timeout=30), 1, self.log())
        return self.log()

    def test_what_it_cannot_serve_stops_the_start(self):
        self.assertIn("lmwarden: the service manager passed 2 sockets (LISTEN_FDS); lmwarden listens "
                      "on one", self.refused(self.listener.fileno(), count="2"))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            self.assertIn("(descriptor 3) is a UDP socket", self.refused(udp.fileno()))
        with socket.socket() as unbound:
            self.assertIn("(descriptor 3) is a TCP socket that does not listen",
                          self.refused(unbound.fileno()))
        with open(self.config) as f:
            self.assertIn("(descriptor 3) is not a socket", self.refused(f.fileno()))
        self.assertIn('LISTEN_FDS is not a count of descriptors: "x"',
                      self.refused(self.listener.fileno(), count="x"))

    def test_variables_meant_for_another_process_are_left_alone(self):
        # LISTEN_PID names the shell's parent: inherited, not this warden's.
        self.write_config("127.0.0.1:0")
        process = self.start(self.listener.fileno(),
                             shell='export LISTEN_PID=$PPID LISTEN_FDS=1; exec "$@"')
        port = self.wait_listening(process)
        self.assertNotEqual(port, self.port)
        self.assertNotIn("socket activation", self.log())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            self.assertEqual(reply.status, 200)
        self.stop(process)


if __name__ == "__main__":
    unittest.main()
