"""The tests' fork server (tests/forkserver.py) gives what a fresh process gives: the same
bytes and exit status, and a command that dies with its caller. (Closed stdin, process
substitution, pipes into `head` and signals through the client: tests/test_hostile_paths.py,
tests/test_io.py and tests/test_train.py run them through the server.)"""

import os
import subprocess
import sys
import time

import pytest

from tests import forkserver
from tests.util import ROOT, env

pytestmark = pytest.mark.skipif(not forkserver.enabled(), reason="fork server switched off")


@pytest.mark.parametrize("args, stdin", [
    (["cat", "-", "-q"], b'{"text": "a"}\n{"text": "\xc3\xa9"}\n'),  # (no timings)
    (["cat", "-"], b'{"text": "a"}\nnot json\n'),           # exit 1, one error line
    (["cat", "--no-such-option"], b""),                     # exit 2, usage
    (["--version"], b""),
])
def test_a_forked_command_equals_a_fresh_process(args, stdin):
    fresh = subprocess.run([sys.executable, "-m", "llmtk", *args], input=stdin,
                           capture_output=True, cwd=ROOT, env=env())
    forked = forkserver.run("llmtk", args, input=stdin, env=env(), cwd=ROOT)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr)


def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(name))
    return out


def test_killing_the_client_kills_its_command():
    forkserver.socket_path()
    server = forkserver._server["proc"].pid
    client = subprocess.Popen([*forkserver.client_command(), "-m", "llmtk", "cat", "-"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env(), cwd=ROOT)
    deadline = time.time() + 30
    while not _children(server) and time.time() < deadline:
        time.sleep(0.02)
    (child,) = _children(server)  # `llmtk cat -`, waiting for input
    client.kill()
    client.wait()
    while os.path.exists(f"/proc/{child}") and child in _children(server) \
            and time.time() < deadline:
        time.sleep(0.02)
    assert child not in _children(server)
    # ... and the server lives on (a caller that died with the reply unread used to take
    # it down, and every later command of this pytest process was refused)
    r = forkserver.run("llmtk", ["--version"], env=env(), cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith(b"llmtk ")


def test_a_caller_that_dies_with_the_reply_unread_leaves_the_server_running():
    """A caller killed between its job and reading the reply resets the connection: the
    server kills that command and goes on serving (it used to die of the reset, and every
    later command of the pytest process was refused)."""
    import socket

    stdin_r, stdin_w = os.pipe()  # `llmtk cat -` waits on it
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(forkserver.socket_path())
    devnull = os.open(os.devnull, os.O_WRONLY)
    forkserver.send_job(sock, "llmtk", ["cat", "-", "-q"], (stdin_r, devnull, devnull), env(),
                        str(ROOT))
    os.close(devnull)
    os.close(stdin_r)
    assert sock.recv(64, socket.MSG_PEEK)  # the pid line arrived, and stays unread
    sock.close()  # with unread data: the server's side reads a reset
    r = forkserver.run("llmtk", ["--version"], env=env(), cwd=ROOT)
    os.close(stdin_w)
    assert r.returncode == 0 and r.stdout.startswith(b"llmtk ")
