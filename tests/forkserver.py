"""Real llmtk processes for the tests, without paying for `import torch` each time.

A process start that imports torch costs 2-3 CPU-seconds on the 2-core CI machine, more
than most of the tiny training runs it starts; the suite starts a few hundred. So each
pytest process starts one server (`python -m tests.forkserver SOCKET`) that imports the
heavy third-party libraries once and then forks a child per command. The child is a real
process: its own pid, the caller's fds on the same numbers (passed over a Unix socket:
0/1/2, or all a shell would pass on through exec), the caller's environment, working
directory and argv, `python -m MODULE` run as `__main__`, and the normal interpreter
exit (threads joined, atexit, flushes). Signals and SIGKILL reach it by pid as they
would reach a process the test started. What differs from `python -m llmtk`: its parent
is the server, and it shares the server's hash seed and import-time library state
(libgomp reads OMP_NUM_THREADS when torch loads: the server is started with the suite's
OMP_NUM_THREADS=1, and llmtk sets torch's threads itself) and llmtk's modules as the
server imported them: the code on disk when the server started (once per pytest
process; the suite does not edit it).

`LLMTK_TEST_FORKSERVER=0` starts every command as a plain `python -m llmtk` instead
(`LLMTK_TEST_PROCESSES=1` as well: that run checks the suite against real start-ups).

    run(module, args, input=, env=, cwd=)   -> subprocess.CompletedProcess (bytes)
    spawn(module, args, env, cwd)            -> Child, running (pid, wait, send_signal, ...)
    client_command()                         -> `python` for shell scripts: a stdlib-only
                                                client that hands its fds to a child and
                                                exits as the child does (tests/fork_client.py)
    env_vars()                               -> the environment shell scripts and torchrun
                                                need to use it (torchrun's PYTHON_EXEC:
                                                tests/fork_python, so its workers fork too)
"""

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Imported once by the server, then every llmtk module (none reads the environment or
# the terminal at import, and none imports an optional library at module level). Not
# pyarrow: it starts a thread at import, and a fork copies no threads, so a lock that
# thread held would stay held in the child.
PRELOAD = ["numpy", "orjson", "zstandard", "typer", "click", "rich.console", "rich.progress",
           "torch", "torch.nn.functional", "torch.distributed", "torch.distributed.checkpoint",
           "torch.distributed.fsdp", "torch.distributed.run", "safetensors.torch",
           "tokenizers", "fasttext_new", "matplotlib", "jinja2",
           # what the trainer's torch.use_deterministic_algorithms() imports on its first
           # call (~800 modules, 1.3 s per training child; no thread started)
           "torch._inductor.config"]


MAX_FDS = 64  # open fds a command may inherit (the client passes all of its own)


def enabled() -> bool:
    return (os.environ.get("LLMTK_TEST_FORKSERVER", "1") != "0"
            and os.environ.get("LLMTK_TEST_PROCESSES") != "1")


# ----------------------------------------------------------------------------- server

def _serve(path: str) -> dict | None:
    """Accept jobs on PATH until the parent closes our stdin. Returns only in a forked
    child, with its job (its fds already in place)."""
    import importlib
    import pkgutil

    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    import llmtk

    for mod in pkgutil.walk_packages(llmtk.__path__, "llmtk."):
        if not mod.name.endswith("__main__"):
            importlib.import_module(mod.name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "reap")
    sel.register(sys.stdin, selectors.EVENT_READ, "parent")
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection to report to
    os.write(1, b"ready\n")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    while True:
        for key, _ in sel.select():
            if key.data == "parent":
                if not os.read(0, 4096):  # the test process is gone
                    os._exit(0)
            elif key.data == "reap":
                _drain(wake_r)
            elif key.data == "accept":
                conn, _ = listener.accept()
                try:
                    job, fds = _receive(conn)
                except (OSError, EOFError, ValueError):  # the caller died while sending
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    sel.close()
                    for sock in (listener, conn, *waiting.values()):
                        sock.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    _place(fds, job.pop("fds"), job.pop("closed"))
                    return job
                for fd in fds:
                    os.close(fd)
                waiting[pid] = conn
                try:
                    conn.sendall(b"%d\n" % pid)
                    sel.register(conn, selectors.EVENT_READ, pid)
                except OSError:  # the caller is gone already
                    _kill(pid)
            elif not _alive(key.fileobj):  # the caller is gone (killed): so is its command
                _kill(key.data)
                sel.unregister(key.fileobj)
        while waiting:  # report every child that ended
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(KeyError):
                    sel.unregister(conn)
                with contextlib.suppress(OSError):
                    conn.sendall(b"%d\n" % status)
                conn.close()


def _alive(conn: socket.socket) -> bool:
    """Whether the caller still holds its end (it sends nothing after the job)."""
    try:
        return bool(conn.recv(1))
    except OSError:  # reset: it died with our reply unread
        return False


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


def _place(fds: list[int], targets: list[int], closed: list[int]) -> None:
    """Put the received fds on the numbers they had in the caller (first out of the way,
    so that no target overwrites a received fd), and close what the caller had closed."""
    import fcntl

    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1000) for fd in fds]
    for fd in fds:
        os.close(fd)
    for fd, target in zip(high, targets, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    for fd in closed:
        os.close(fd)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, MAX_FDS)
    size = int.from_bytes(data[:8], "big")
    data = data[8:]
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("client went away")
        data += chunk
    return json.loads(data), fds


def _run_job(job: dict) -> None:
    """In the child: become `python -m MODULE ARGS` in the caller's cwd and environment."""
    import io
    import runpy

    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def stream(fd, mode, errors, line_buffering):
        try:
            os.fstat(fd)
        except OSError:  # closed: Python starts with None for that stream
            return None
        if mode == "w" and unbuffered:  # python -u: no buffer below the text layer
            raw = open(fd, "wb", buffering=0, closefd=False)
            return io.TextIOWrapper(raw, encoding="utf-8", errors=errors, write_through=True)
        s = open(fd, mode, encoding="utf-8", errors=errors, closefd=False)
        if mode == "w":
            s.reconfigure(line_buffering=line_buffering)
        return s

    sys.stdin = sys.__stdin__ = stream(0, "r", "surrogateescape", False)
    sys.stdout = sys.__stdout__ = stream(1, "w", "surrogateescape", _isatty(1))
    sys.stderr = sys.__stderr__ = stream(2, "w", "backslashreplace", True)
    sys.path[0] = job["cwd"]  # as `python -m` puts the working directory first
    sys.argv = [job["module"], *job["args"]]
    try:
        runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = _exit_code(e.code)
    except BaseException as e:  # what the interpreter does with an uncaught exception
        sys.excepthook(type(e), e, e.__traceback__)
        code = 1
        if isinstance(e, KeyboardInterrupt):
            code = -signal.SIGINT
    _exit(code)


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _exit(code: int) -> None:
    """The interpreter's exit without its module teardown: that teardown writes to every
    object the child shares with the server, so copy-on-write copies the whole heap
    (2 s of a child that imported torch). Threads are joined, atexit handlers run and
    the streams flushed, as at a normal exit."""
    import atexit
    import threading

    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            if code == 0:
                code = 120  # what Python exits with when the final flush fails
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


# ----------------------------------------------------------------------------- client

_server: dict = {}
_lock = threading.Lock()


def socket_path() -> str:
    """This process's server (started on first use), as the path of its socket."""
    with _lock:
        if _server.get("pid") != os.getpid():
            d = tempfile.mkdtemp(prefix="llmtk-forkserver-")
            path = os.path.join(d, "s")
            server_env = {k: v for k, v in os.environ.items() if k != "LLMTK_DEBUG"}
            server_env["PYTHONPATH"] = ROOT
            proc = subprocess.Popen([sys.executable, "-m", "tests.forkserver", path],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
                                    env=server_env)
            if proc.stdout.readline() != b"ready\n":
                raise RuntimeError("tests/forkserver.py did not start")
            _server.update(pid=os.getpid(), proc=proc, path=path)
        return _server["path"]


def env_vars() -> dict[str, str]:
    """What a test's subprocess environment needs so that shell scripts and torchrun's
    workers start through the server: its socket, and tests/fork_python as torchrun's
    PYTHON_EXEC."""
    return {"LLMTK_TEST_FORKSERVER": socket_path(), "LLMTK_TEST_PYTHON": sys.executable,
            "PYTHON_EXEC": os.path.join(ROOT, "tests", "fork_python")}


class Child:
    """A forked command: pid, wait(), poll(), send_signal(), kill(), returncode."""

    def __init__(self, module: str, args: list[str], fds: tuple[int, int, int], env: dict,
                 cwd: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(socket_path())
        send_job(self.sock, module, args, fds, env, cwd)
        self._buf = b""
        self.pid = int(self._line(None))
        self.returncode: int | None = None
        self.stderr = None

    def _line(self, timeout: float | None) -> bytes:
        self.sock.settimeout(timeout)
        while b"\n" not in self._buf:
            try:
                chunk = self.sock.recv(64)
            except TimeoutError:
                raise subprocess.TimeoutExpired(str(self.pid), timeout) from None
            if not chunk:
                raise RuntimeError("tests/forkserver.py went away")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(int(self._line(timeout)))
            self.sock.close()
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0.001)
        except subprocess.TimeoutExpired:
            return None

    def communicate(self, timeout: float | None = None) -> tuple[None, bytes | None]:
        err = self.stderr.read() if self.stderr is not None else None
        self.wait(timeout)
        return None, err

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def send_job(sock: socket.socket, module: str, args: list[str], fds, env: dict,
             cwd: str, targets=(0, 1, 2), closed=()) -> None:
    """The job and the fds the child gets: fds[i] becomes the child's fd targets[i]; the
    fd numbers in `closed` are closed in the child. Also tests/fork_client.py's."""
    payload = json.dumps({"module": module, "args": list(args), "env": dict(env),
                          "cwd": str(cwd), "fds": list(targets),
                          "closed": list(closed)}).encode()
    socket.send_fds(sock, [len(payload).to_bytes(8, "big") + payload], list(fds))


def spawn(module: str, args: list[str], env: dict, cwd, stderr_pipe: bool = False) -> Child:
    """`python -m MODULE ARGS` started and left running, stdin and stdout on /dev/null,
    stderr on /dev/null or a pipe (`child.stderr`, bytes, read by `child.communicate()`)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    err_r, err_w = os.pipe() if stderr_pipe else (None, devnull)
    try:
        child = Child(module, args, (devnull, devnull, err_w), env, str(cwd))
    finally:
        os.close(devnull)
        if stderr_pipe:
            os.close(err_w)
    child.stderr = os.fdopen(err_r, "rb") if stderr_pipe else None
    return child


def run(module: str, args: list[str], input: bytes = b"", env: dict | None = None,
        cwd=None) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` as a forked child, with pipes as subprocess.run gives it."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        child = Child(module, args, (in_r, out_w, err_w), env or dict(os.environ),
                      str(cwd or ROOT))
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    out, err = _communicate(in_w, out_r, err_r, input or b"")
    code = child.wait()
    return subprocess.CompletedProcess([module, *args], code, out, err)


def _communicate(in_w: int, out_r: int, err_r: int, data: bytes) -> tuple[bytes, bytes]:
    def feed():
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(in_w, view[:1 << 16]):]
        except BrokenPipeError:
            pass
        finally:
            os.close(in_w)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    sel = selectors.DefaultSelector()
    for fd in chunks:
        sel.register(fd, selectors.EVENT_READ)
    while sel.get_map():
        for key, _ in sel.select():
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                chunks[key.fd].append(chunk)
            else:
                sel.unregister(key.fd)
                os.close(key.fd)
    sel.close()
    feeder.join()
    return b"".join(chunks[out_r]), b"".join(chunks[err_r])


def client_command() -> list[str]:
    """`python` for a shell script, through this process's server: `[*client_command(),
    "-m", "llmtk", "clean", ...]` (env_vars() in the script's environment)."""
    return [sys.executable, "-I", "-S", os.path.join(ROOT, "tests", "fork_client.py")]


if __name__ == "__main__":
    child_job = _serve(sys.argv[1])
    _run_job(child_job)
