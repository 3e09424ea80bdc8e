"""The warden as a service: `make install` (scripts/install.sh) into a
DESTDIR, the systemd unit it writes, and the log's form under the journal.

Run: LMWARDEN_BINARY=build/release/src/lmwarden \\
     python3 -m unittest discover -s tests/release -p '*_test.py' -v

Nothing is installed outside a temporary directory; the one warden started
listens on 127.0.0.1 port 0 and is stopped.
"""
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import unittest

BINARY = os.environ.get("LMWARDEN_BINARY", "")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def unit_settings(path):
    """The unit's KEY=value lines, comments left out (a key set twice keeps
    its last value, as systemd's ExecStart= would not, but none is here)."""
    settings = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "[")):
                key, _, value = line.partition("=")
                settings[key] = value
    return settings


def seconds(duration):
    found = re.fullmatch(r"(\d+)(s|min)", duration)
    if not found:
        raise AssertionError(f"not a duration this test reads: {duration}")
    return int(found.group(1)) * (60 if found.group(2) == "min" else 1)


@unittest.skipUnless(BINARY, "LMWARDEN_BINARY names the binary under test")
class Install(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.TemporaryDirectory(prefix="lmwarden-install-")
        self.addCleanup(self.root.cleanup)

    def install(self, prefix="/opt/lmwarden", expect=0):
        run = subprocess.run(["bash", os.path.join(REPO, "scripts", "install.sh")],
                             env={**os.environ, "DESTDIR": self.root.name, "PREFIX": prefix,
                                  "LMWARDEN_BINARY": BINARY},
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, expect, run.stdout + run.stderr)
        return run.stdout + run.stderr

    def under_root(self, path):
        return self.root.name + path

    def test_the_unit_starts_the_installed_binary_on_the_installed_configuration(self):
        self.install()
        binary = self.under_root("/opt/lmwarden/bin/lmwarden")
        self.assertTrue(os.access(binary, os.X_OK))
        unit = unit_settings(self.under_root("/etc/systemd/system/lmwarden.service"))
        command = shlex.split(unit["ExecStart"])
        self.assertEqual(command[0], "/opt/lmwarden/bin/lmwarden")
        # The unit's own command line, its paths under DESTDIR, checks the
        # configuration it names.
        config = command[command.index("--config") + 1]
        check = subprocess.run([binary] + [self.under_root(a) if a == config else a for a in command[1:]]
                               + ["--check"], capture_output=True, text=True, timeout=30)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertIn("the configuration is valid", check.stdout)
        # systemd must not kill a draining warden before its grace is over.
        with open(self.under_root(config)) as f:
            grace = re.search(r"^\s*shutdown_grace:\s*(\S+)", f.read(), re.M).group(1)
        self.assertGreater(seconds(unit["TimeoutStopSec"]), seconds(grace))
        self.assertEqual(unit["ExecReload"], "/bin/kill -HUP $MAINPID")

    @unittest.skipUnless(shutil.which("systemd-analyze"), "systemd-analyze is not installed")
    def test_systemd_reads_the_units(self):
        self.install()
        units = self.under_root("/etc/systemd/system")
        # The service's ExecStart names the binary where it will be; here that
        # is under DESTDIR, and systemd checks that the binary is there. The
        # socket is read with it, as the service it starts.
        checked = []
        for name in ("lmwarden.socket", "lmwarden.service"):
            checked.append(os.path.join(self.root.name, name))
            with open(os.path.join(units, name)) as f, open(checked[-1], "w") as out:
                out.write(f.read().replace("ExecStart=/opt/", f"ExecStart={self.root.name}/opt/"))
        run = subprocess.run(["systemd-analyze", "verify"] + checked, capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertNotIn("lmwarden.service:", run.stdout + run.stderr)
        self.assertNotIn("lmwarden.socket:", run.stdout + run.stderr)
        socket = unit_settings(checked[0])
        self.assertEqual(socket["ListenStream"], "127.0.0.1:8080")
        # The example configuration listens where the socket does.
        with open(self.under_root("/etc/lmwarden/lmwarden.yaml")) as f:
            self.assertRegex(f.read(), r"(?m)^listen: 127\.0\.0\.1:8080$")

    def test_a_second_install_keeps_the_operators_configuration(self):
        self.install()
        config = self.under_root("/etc/lmwarden/lmwarden.yaml")
        with open(config, "a") as f:
            f.write("# the operator's own line\n")
        with open(config) as f:
            edited = f.read()
        said = self.install()
        self.assertIn("kept " + config, said)
        with open(config) as f:
            self.assertEqual(f.read(), edited)

    def test_relative_paths_are_the_callers(self):
        binary_dir = os.path.join(self.root.name, "bin")
        os.makedirs(binary_dir)
        subprocess.run(["cp", BINARY, os.path.join(binary_dir, "lmwarden")], check=True)
        run = subprocess.run(["bash", os.path.join(REPO, "scripts", "install.sh")], cwd=self.root.name,
                             env={**os.environ, "DESTDIR": "staged/", "PREFIX": "/usr/",
                                  "LMWARDEN_BINARY": "bin/lmwarden"},
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        staged = os.path.join(self.root.name, "staged")
        self.assertTrue(os.access(os.path.join(staged, "usr/bin/lmwarden"), os.X_OK), run.stdout)
        unit = unit_settings(os.path.join(staged, "etc/systemd/system/lmwarden.service"))
        self.assertEqual(unit["ExecStart"].split()[0], "/usr/bin/lmwarden")
        self.assertFalse(os.path.exists(os.path.join(REPO, "staged")))

    def test_a_relative_prefix_is_refused(self):
        said = self.install(prefix="usr/local", expect=2)
        self.assertIn("PREFIX must be an absolute path", said)
        self.assertFalse(os.path.exists(self.under_root("/etc/systemd/system/lmwarden.service")))


@unittest.skipUnless(BINARY, "LMWARDEN_BINARY names the binary under test")
class JournalLog(unittest.TestCase):
    """Under systemd, stdout is the journal's stream and JOURNAL_STREAM names
    it: each line then starts with its syslog priority, without a time."""

    def log_of_a_short_run(self, journal_stream_of):
        with tempfile.TemporaryDirectory(prefix="lmwarden-journal-") as d:
            config = os.path.join(d, "lmwarden.yaml")
            with open(config, "w") as f:
                # A backend nothing listens on: its probes fail at once, so a
                # warning comes soon after the start.
                f.write("listen: 127.0.0.1:0\nthreads: 1\nscrape_interval: 100ms\nunhealthy_after: 1\n"
                        "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:9\n")
            log_path = os.path.join(d, "out.log")
            with open(log_path, "w") as log:
                stat = os.fstat(log.fileno())
                env = {**os.environ, "JOURNAL_STREAM": journal_stream_of(stat)}
                process = subprocess.Popen([BINARY, "serve", "--config", config], stdout=log,
                                           stderr=subprocess.STDOUT, env=env)
                try:
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline:
                        with open(log_path) as f:
                            if "unhealthy" in f.read():
                                break
                        time.sleep(0.05)
                finally:
                    process.terminate()
                    process.wait(timeout=10)
            with open(log_path) as f:
                return f.read().splitlines()

    def test_lines_carry_their_priority_for_the_journal(self):
        lines = self.log_of_a_short_run(lambda s: f"{s.st_dev}:{s.st_ino}")
        info = [l for l in lines if l.startswith("<6>[info] ")]
        warnings = [l for l in lines if l.startswith("<4>[warning] ")]
        self.assertTrue(info, lines)
        self.assertTrue(any("unhealthy" in l for l in warnings), lines)
        self.assertFalse([l for l in lines if re.match(r"\[\d{4}-", l)], "a time in a journal line")
        self.assertIn("<6>lmwarden listening on http://127.0.0.1:", "\n".join(lines))
        self.assertEqual([l for l in lines if not re.match(r"<[0-7]>", l)], [], "a line without a priority")

    def test_what_stops_the_start_is_an_error_for_the_journal(self):
        with tempfile.TemporaryDirectory(prefix="lmwarden-journal-") as d:
            config = os.path.join(d, "lmwarden.yaml")
            with open(config, "w") as f:
                f.write("lisen: 127.0.0.1:0\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:9\n")
            log_path = os.path.join(d, "out.log")
            with open(log_path, "w") as log:
                stat = os.fstat(log.fileno())
                run = subprocess.run([BINARY, "serve", "--config", config], stdout=log, stderr=log,
                                     env={**os.environ, "JOURNAL_STREAM": f"{stat.st_dev}:{stat.st_ino}"},
                                     timeout=30)
            with open(log_path) as f:
                lines = f.read().splitlines()
        self.assertEqual(run.returncode, 2)
        self.assertEqual(lines, ["<3>lmwarden: invalid configuration",
                                 f'<3>{config}:1: lisen: unknown key (did you mean "listen"?)'])

    def test_another_stream_gets_the_times(self):
        # JOURNAL_STREAM inherited from a parent, naming a stream that is not
        # this process's stdout: a plain log, stamped.
        lines = self.log_of_a_short_run(lambda s: f"{s.st_dev}:{s.st_ino + 1}")
        self.assertTrue(lines)
        stamped = [l for l in lines if re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d\d:\d\d\] \[", l)]
        self.assertTrue(stamped, lines)
        self.assertFalse([l for l in lines if l.startswith("<")], lines)


if __name__ == "__main__":
    unittest.main()
