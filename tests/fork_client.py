"""`python -I -S tests/fork_client.py [-u] -m MODULE ARGS...`: run `python [-u] -m MODULE
ARGS` as a child of the tests' fork server (tests/forkserver.py; its socket in
LLMTK_TEST_FORKSERVER) and exit as it does. For shell scripts and torchrun's workers in
the tests (tests/fork_python): a start-up of a few milliseconds (the standard library
only, no site) instead of importing torch.

The child gets the fds this process would pass on through exec (0/1/2, a process
substitution's /dev/fd/63, ...) on the same numbers, and 0/1/2 closed where they are
closed here; this process then lets go of 0/1/2, so end of file and closed pipes reach
the child alone. Signals sent to this process are passed on to the child; a child killed
by a signal kills this process with the same signal, so a shell sees the same status.
(SIGKILL cannot be passed on: tests that kill a command use the child's own pid.)"""

import os
import signal
import socket
import sys

# The checkout's root, for tests/forkserver.py's side of the protocol (-I leaves the
# script's directory off sys.path).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.forkserver import MAX_FDS, send_job  # noqa: E402


def inherited_fds() -> tuple[list[int], list[int]]:
    """(the fds exec would pass on, which of 0/1/2 are closed)."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if os.get_inheritable(fd) or fd <= 2:
                fds.append(fd)
        except OSError:  # listdir's own fd, closed by now
            pass
    closed = [fd for fd in (0, 1, 2) if fd not in fds]
    return sorted(fds)[:MAX_FDS], closed


def python_args(argv: list[str]) -> tuple[str, list[str], dict]:
    """(module, its arguments, environment changes) of `[-u] -m MODULE ARGS`, the only
    python command lines the tests and torchrun give."""
    extra = {}
    if argv[:1] == ["-u"]:
        extra["PYTHONUNBUFFERED"] = "1"
        argv = argv[1:]
    if len(argv) < 2 or argv[0] != "-m":
        sys.exit(f"fork_client.py: expected [-u] -m MODULE ARGS, got {argv}")
    return argv[1], argv[2:], extra


def main() -> None:
    module, args, extra = python_args(sys.argv[1:])
    fds, closed = inherited_fds()
    for _ in closed:  # hold the closed numbers, or the socket would take one of them
        os.open(os.devnull, os.O_RDWR)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["LLMTK_TEST_FORKSERVER"])
    send_job(sock, module, args, fds, {**os.environ, **extra}, os.getcwd(), targets=fds,
             closed=closed)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd <= 2:
            os.dup2(devnull, fd)
        else:
            os.close(fd)
    reply = sock.makefile("rb")
    pid = int(reply.readline())
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda n, _frame: os.kill(pid, n))
    code = os.waitstatus_to_exitcode(int(reply.readline()))
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


main()
