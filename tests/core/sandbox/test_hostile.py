"""Hostile programs against each real backend (bubblewrap and Docker).

Every test asserts that the attack was contained AND that the next benign
program, in the same sandbox worker, still gets the right answer.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from populora_core.sandbox import Job, Result, SandboxPool
from populora_core.sandbox.harness_copy import HARNESS_MOUNT, HARNESS_PACKAGE
from tests.conftest import SECRET

BENIGN = Job(code="def f(n):\n    return sum(range(n))\n", expr="f(100)")


def attack(pool: SandboxPool, code: str, **kw) -> Result:
    """Runs ``code``, then a benign job; asserts the benign one is right; returns the attack's result."""
    hostile, benign = pool.run([Job(code=code, **kw), BENIGN])
    assert benign.status == "ok", benign
    assert benign.value == "4950"
    return hostile


def test_network_connect_to_host_listener_fails(single_pool):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = (
        "import socket\n"
        "s = socket.socket()\ns.settimeout(1)\n"
        f"s.connect(('127.0.0.1', {port}))\n"
        "s.sendall(b'escaped')\nprint('CONNECTED')\n"
    )
    try:
        result = attack(single_pool, code)
    finally:
        stop.set()
        thread.join(2)
        server.close()
    assert "CONNECTED" not in result.stdout
    assert result.status == "error"
    assert accepted == []


def test_writing_outside_the_temp_dir_does_not_reach_the_host(single_pool, tmp_path):
    targets = [tmp_path / "escape.txt", Path(__file__).parent / "escape.txt", Path("/usr/lib/populora-escape")]
    code = "written = []\n"
    for target in targets:
        code += f"try:\n    open({str(target)!r}, 'w').write('x')\n    written.append(1)\nexcept OSError:\n    pass\n"
    code += "print(len(written))\n"
    attack(single_pool, code)
    for target in targets:
        assert not target.exists(), target


def test_reading_secrets_of_the_host_fails(single_pool):
    code = (
        "out = []\n"
        "for path in ['/etc/shadow', '/root/.bashrc', '/root/.ssh/id_rsa', '/etc/passwd']:\n"
        "    try:\n        out.append(open(path).read())\n"
        "    except OSError as exc:\n        out.append(type(exc).__name__)\n"
        "import os\n"
        "try:\n    out.append(os.listdir('/root'))\nexcept OSError as exc:\n    out.append(type(exc).__name__)\n"
        "print(out)\n"
    )
    result = attack(single_pool, code)
    shadow = Path("/etc/shadow").read_text() if Path("/etc/shadow").exists() else ""
    if shadow:
        assert shadow.splitlines()[0] not in result.stdout
    assert "root:x:0:0:root:/root" not in result.stdout  # the host's passwd line


def test_the_judges_harness_cannot_be_changed(single_pool):
    """The harness every later judged program imports (read-only at HARNESS_MOUNT) takes no
    write, new module, bytecode cache, mode change, removal or rename."""
    harness = f"{HARNESS_MOUNT}/populora_core/harness"
    attempts = (
        f"open('{harness}/candidate.py', 'a').write('x')",
        f"open('{harness}/evil.py', 'w')",
        f"open('{HARNESS_MOUNT}/populora_core/__init__.py', 'w')",
        f"os.mkdir('{harness}/__pycache__')",
        f"os.chmod('{harness}/wire.py', 0o777)",
        f"os.unlink('{harness}/lcb.py')",
        f"os.rename('{harness}/evalplus.py', '/tmp/evalplus.py')",
    )
    code = "import os\nchanged = []\n"
    for attempt in attempts:
        code += f"try:\n    {attempt}\n    changed.append({attempt!r})\nexcept OSError:\n    pass\n"
    code += "import populora_core.harness.candidate\nprint(changed, populora_core.harness.candidate.__file__)\n"
    result = attack(single_pool, code)
    assert result.stdout == f"[] {harness}/candidate.py\n", result
    copy = single_pool.backend.harness.root() / "populora_core" / "harness"
    assert {p.name: p.read_text() for p in copy.iterdir()} == {
        p.name: p.read_text() for p in HARNESS_PACKAGE.glob("*.py")
    }


def test_parent_environment_is_not_readable(single_pool):
    code = (
        "import os\nprint(dict(os.environ))\n"
        "for pid in ('1', str(os.getppid()), 'self'):\n"
        "    try:\n        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as exc:\n        print(type(exc).__name__)\n"
    )
    result = attack(single_pool, code)
    assert SECRET not in result.stdout
    assert "POPULORA_TEST_SECRET" not in result.stdout


def test_fork_bomb_is_contained(single_pool):
    result = attack(
        single_pool, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    assert result.status in ("timeout", "error")


def test_memory_bomb_is_contained(single_pool):
    result = attack(single_pool, "x = bytearray(8 * 1024 ** 3)\n")
    assert result.status == "memory"
    gradual = attack(single_pool, "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 ** 2))\n")
    assert gradual.status == "memory"


def test_infinite_loop_times_out(single_pool):
    started = time.monotonic()
    result = attack(single_pool, "while True:\n    pass\n", timeout_s=0.5)
    assert result.status == "timeout"
    assert time.monotonic() - started < 10


def test_setsid_grandchild_does_not_outlive_its_job(single_pool):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    started = time.monotonic()
    result = attack(single_pool, code)
    assert result.status == "ok" and "parent done" in result.stdout
    assert time.monotonic() - started < 5  # the held output pipe did not stall the worker
    # The next program in the same sandbox sees no leftover process.
    survey = single_pool.run(
        [
            Job(
                code=(
                    "import os\nme, worker = os.getpid(), os.getppid()\n"
                    "others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me, worker)]\n"
                )
                + "alive = [p for p in others if open(f'/proc/{p}/stat').read().split()[2] != 'Z']\n",
                expr="alive",
            )
        ]
    )[0]
    assert survey.status == "ok", survey
    assert survey.value == "[]"


def test_a_program_cannot_kill_or_stop_its_worker(single_pool):
    """The worker is pid 1 of its pid namespace: the signals its programs send it are dropped
    (and it has no init beside it, running as the program's uid, to trace or signal)."""
    restarts = single_pool.stats.worker_restarts
    for sig in ("SIGKILL", "SIGSTOP", "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGQUIT"):
        result = attack(single_pool, f"import os, signal\nos.kill(os.getppid(), signal.{sig})\nprint(os.getppid())\n")
        assert (result.status, result.stdout) == ("ok", "1\n"), (sig, result)
    everyone = attack(single_pool, "import os, signal\nos.kill(-1, signal.SIGKILL)\n")
    assert "No such process" in (everyone.error or ""), everyone  # nobody else to signal: not even pid 1
    assert (attack(single_pool, "", expr="6 * 7").value, single_pool.stats.worker_restarts) == ("42", restarts)


def test_huge_output_is_capped(single_pool):
    result = attack(single_pool, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
    assert result.status == "output_limit"
    assert len(result.stdout) <= single_pool.config.max_output_bytes
    big_value = attack(single_pool, "def f():\n    return 'y' * 10 ** 7\n", expr="f()")
    assert big_value.status == "output_limit"


def test_os_exit_is_an_error(single_pool):
    result = attack(single_pool, "import os\nos._exit(0)\n")
    assert result.status == "error"


def test_ignoring_sigterm_still_times_out(single_pool):
    code = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    result = attack(single_pool, code, timeout_s=0.5)
    assert result.status == "timeout"


def test_deep_recursion_is_contained(single_pool):
    plain = attack(single_pool, "def r(n):\n    return r(n + 1)\nr(0)\n")
    assert plain.status == "error" and "RecursionError" in (plain.error or "")
    code = "import sys\nsys.setrecursionlimit(10 ** 8)\ndef r(n):\n    return r(n + 1) + [n]\nr(0)\n"
    unbounded = attack(single_pool, code)
    assert unbounded.status in ("error", "memory", "timeout")


def test_ctypes_segfault_is_an_error(single_pool):
    result = attack(single_pool, "import ctypes\nctypes.string_at(0)\n")
    assert result.status == "error"
    assert "SIGSEGV" in (result.error or "")


def test_spawning_a_shell_is_contained(single_pool, tmp_path):
    marker = tmp_path / "shell-was-here"
    code = (
        "import os, subprocess\n"
        f"cmd = 'id; touch {marker}'\n"
        "print(os.system(cmd))\n"
        "for sh in ('/bin/sh', '/bin/bash', '/usr/bin/dash'):\n"
        "    try:\n        print(subprocess.run([sh, '-c', cmd], capture_output=True, timeout=1))\n"
        "    except Exception as exc:\n        print(type(exc).__name__)\n"
    )
    result = attack(single_pool, code)
    assert not marker.exists()
    assert "uid=0(root)" not in result.stdout
