"""`python -I -S tests/fork_client.py MODULE ARGS...`: run `python -m MODULE ARGS` as a
child of the tests' fork server (tests/forkserver.py; its socket in LLMTK_TEST_FORKSERVER)
and exit as it does. For shell scripts in tests: a start-up of a few milliseconds (the
standard library only, no site) instead of importing torch.

The child gets this process's fds 0/1/2; this process then lets go of them, so end of
file and closed pipes reach the child alone. Signals sent to this process are passed on
to the child; a child killed by a signal kills this process with the same signal, so a
shell sees the same status. (SIGKILL cannot be passed on: tests that kill a command use
the child's own pid.)"""

import json
import os
import signal
import socket
import sys


def main() -> None:
    module, args = sys.argv[1], sys.argv[2:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["LLMTK_TEST_FORKSERVER"])
    payload = json.dumps({"module": module, "args": args, "env": dict(os.environ),
                          "cwd": os.getcwd()}).encode()
    socket.send_fds(sock, [len(payload).to_bytes(8, "big") + payload], [0, 1, 2])
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
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
