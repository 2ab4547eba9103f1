"""Warm job processes: a local run's jobs start from a process that has already imported torch.

Every rule's script is a Python process of its own that imports what it computes with before its first line of work:
torch alone 1.4-1.9 s of CPU, the PyTorch optimiser's first step another 1.2 s (``torch._dynamo``), about half of a
smoke run's job-seconds (docs/time-budget.md).  In a run on this machine (Snakemake's local executor) the Snakefile's
``onstart`` starts one *server* per run (:func:`start`): a process in a session of its own that imports those modules
once (:data:`PRELOAD`; nothing is computed in it, so that a fork of it is safe) and listens on a Unix
socket whose address the jobs inherit (:data:`ADDRESS`).  A script enters :func:`unie.pipeline.rule.job` first, which
calls :func:`delegate`: the job's process (the *client*) sends the server its script, ``argv``, working directory,
environment, ``sys.path``, umask and start time, and its standard streams as file descriptors; the server forks a
*child* that takes all of them and runs the script from its first line (Snakemake's preamble included) as
``python script.py`` would, then exits with the script's status; the client waits, forwards SIGTERM, SIGINT, SIGHUP,
SIGQUIT, SIGUSR1 and SIGUSR2 to the child, and exits with the child's status (a child killed by a signal: the client
kills itself with the same signal).  A client killed outright (``kill -9``) takes its child with it (the server kills
the child when the client's connection closes), as a job's process would have died.

Nothing changes in what a job computes: the child sets torch's threads as a new process would
(:func:`unie.pipeline.rule.torch_threads`), reads its own environment and files; a forked process draws the same
numbers from every seeded generator.  A job that starts while the server still imports torch (its socket appears,
listening, once it is ready: about 3 s into a run) waits for it.  A job runs in its own process as before
(:func:`delegate` returns) when there is no server (a dry run, a cluster executor, a job inside a cluster job, another
host, ``UNIE_WARM=0``, a run of table and figure jobs only: :func:`wants_server`), when the job has a ``benchmark:``
file (Snakemake measures the job's own process tree), when its Hugging Face variables differ from the server's
(:func:`import_env`), or when the server ended, cannot be reached or does not answer before it forks.  The server ends
with the run (:func:`stop` from ``onsuccess``/``onerror``), or by itself once it has had no job for
:data:`IDLE_SECONDS` and none is running (a run that ended some other way).

``python -m unie.pipeline.warm serve SOCKET [--torch-only]`` is the server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

ADDRESS = "UNIE_WARM_ADDRESS"  # "<host>\t<socket path>\t<pid>" of the run's server, in every job's environment
CHILD = "UNIE_WARM_CHILD"  # set in a child's environment: it runs the script itself
STARTED = "UNIE_JOB_STARTED"  # the client process's start (seconds since the epoch): the job's start in its record
OFF = "UNIE_WARM"  # "0": no server (every job imports in its own process)
# imported, nothing run: a fork of a process that imported torch and numpy (whose BLAS keeps an idle thread, with its
# own fork handlers) is what PyTorch's data-loader workers are
PRELOAD = ("torch", "torch._dynamo", "numpy", "safetensors.torch", "tqdm", "snakemake.script")
# then, once the server is ready and while no job waits, what every lm-eval job imports (3.3 s of CPU each:
# transformers 2.2, lm-eval 1.1).  These libraries (and the datasets and huggingface_hub they import) read variables
# when imported (the Hugging Face caches and offline switches, HOME), so a job whose values of the variables named by
# IMPORT_ENV differ from those the server started with runs in its own process.  They bring pyarrow, whose jemalloc
# starts a background thread; jemalloc's fork handlers leave a child a sound allocator (as in every PyTorch data-loader
# worker forked after pyarrow was imported)
PRELOAD_READING_ENV = (
    "transformers",
    "transformers.tokenization_utils_fast",
    "lm_eval.api.registry",
    "lm_eval.evaluator",
)
# the rules whose jobs import them (by name: lm-eval, the tokenizer's transformers, the prefetch checks); a run with
# fewer than two such jobs to run (three seeds' Table 2, a table rerun) does not import them: 3.3 s of CPU for nothing
LATER_FOR = ("dllm_", "tokenizer", "prefetch")
IMPORT_ENV = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "DATASETS_", "LM_EVAL", "XDG_", "HOME", "USE_")
IDLE_SECONDS = 60.0
READY_WAIT = 30.0  # the longest a job waits for its run's server to become ready (it imports torch: ~3 s)
# the rules whose jobs import no torch (tables, figures, the pages: the modules of their jobs import none,
# tests/test_startup.py): a run of only these starts no server
LIGHT = ("table", "fig", "paper_", "partition_check", "docs", "replicates")
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


# ------------------------------------------------------------------------------------------------- the messages
def _send(sock: socket.socket, obj, fds=()) -> None:
    data = json.dumps(obj).encode()
    msg = struct.pack("!I", len(data)) + data
    sent = socket.send_fds(sock, [msg], list(fds)) if fds else 0  # the descriptors travel with the first bytes
    sock.sendall(msg[sent:])


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("connection closed")
        buf += part
    return buf


def _recv(sock: socket.socket, with_fds: int = 0):
    """One message: ``obj`` (and the list of file descriptors received with it when ``with_fds``)."""
    fds = []
    if with_fds:
        head, fds, _flags, _addr = socket.recv_fds(sock, 4, with_fds)
        if len(head) < 4:
            head += _recv_exact(sock, 4 - len(head))
    else:
        head = _recv_exact(sock, 4)
    (n,) = struct.unpack("!I", head)
    obj = json.loads(_recv_exact(sock, n))
    return (obj, fds) if with_fds else obj


# ------------------------------------------------------------------------------------------------- the client
_CHILD_START: list = []  # [the client's start, or None in a job's own process], read once


def child_start() -> float | None:
    """In a job the warm server runs: its client's start (the job's start, imports included); None in a job that runs
    in its own process.  The first call takes :data:`CHILD` and :data:`STARTED` out of the environment, so that the
    processes a job starts (a torchrun rank, a nested run) do not inherit them."""
    if not _CHILD_START:
        flag, started = os.environ.pop(CHILD, None), os.environ.pop(STARTED, None)
        _CHILD_START.append(float(started) if flag and started else None)
    return _CHILD_START[0]


def _server_address() -> str | None:
    """The socket of this host's run server once it is ready (waiting up to :data:`READY_WAIT` while it starts), or None
    (no server, another host, switched off, or a server that ended).  A child's environment has none: it runs its
    script itself."""
    import time

    if os.environ.get(OFF) == "0":
        return None
    host, path, pid = (os.environ.get(ADDRESS, "").split("\t") + ["", ""])[:3]
    if not path or host != socket.gethostname():
        return None
    deadline = time.monotonic() + READY_WAIT
    while not os.path.exists(path):  # the server still imports: its child will not import torch again
        try:
            os.kill(int(pid), 0)
        except (OSError, ValueError):
            return None  # it ended (or never started)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)
    return path


def delegate(snakemake, started: float) -> None:
    """Run this job's script in the run's server and exit with its status; return (the caller runs the script itself)
    when there is no server, the job is benchmarked, or the server does not take it (module doc).  ``started``: this
    process's start (seconds since the epoch), the job's start in the child's record."""
    if child_start() is not None:  # the child (this call also takes the child's variables out of the environment)
        return
    path = _server_address()
    if path is None or getattr(snakemake, "bench_iteration", None) is not None:
        return
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if not os.path.isfile(script):
        return
    env = dict(os.environ)
    env.pop(ADDRESS)  # the child runs the script itself
    env[CHILD] = "1"
    env[STARTED] = repr(started)
    umask = os.umask(0)
    os.umask(umask)
    request = {
        "script": script,
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "env": env,
        "path": sys.path,
        "umask": umask,
    }
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(None)
    request["fds"] = [fd is not None for fd in fds]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(10.0)
        sock.connect(path)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _send(sock, request, [fd for fd in fds if fd is not None])
        # no running twice: once the request is sent, only the server's answer (or its end) counts, however late
        sock.settimeout(None)
        pid = _recv(sock)["pid"]  # forked: from here on the child runs the script, not this process
    except (OSError, ValueError, KeyError, TypeError, ConnectionError):
        sock.close()
        return
    if pid is None:  # not taken (another environment): this process runs the script
        sock.close()
        return
    pid = int(pid)
    _wait_for(sock, pid)


def _wait_for(sock: socket.socket, pid: int):
    """The client's rest: forward signals to ``pid`` until the server reports its status, then exit with it."""

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)
    try:  # a forwarded signal interrupts nothing here: the read is resumed (PEP 475)
        status = int(_recv(sock)["status"])
    except (OSError, ValueError, KeyError, ConnectionError) as e:
        print(f"unie: error: lost the warm job server while it ran this job (pid {pid}): {e}", file=sys.stderr)
        os._exit(1)
    sock.close()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


# ------------------------------------------------------------------------------------------------- the child
def wants_server(rules) -> bool:
    """Whether a run whose jobs to run are of ``rules`` (one name per job) gains from a server: some job is of a rule
    not named by :data:`LIGHT` (a rerun of a table starts none: its job would wait for a torch it never imports)."""
    return any(not rule.startswith(LIGHT) for rule in rules)


def wants_later(rules) -> bool:
    """Whether a run whose jobs to run are of ``rules`` (one name per job) gains from :data:`PRELOAD_READING_ENV`: at
    least two of them are rules named by :data:`LATER_FOR`."""
    return sum(1 for rule in rules if rule.startswith(LATER_FOR)) >= 2


def import_env(environ) -> dict:
    """The variables of ``environ`` that the preloaded libraries read when imported (named by :data:`IMPORT_ENV`)."""
    return {k: v for k, v in environ.items() if k.startswith(IMPORT_ENV)}


def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the job's process and run its script; never returns."""
    code = 1
    try:
        for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGPIPE"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.set_wakeup_fd(-1)
        received = iter(fds)
        for target, present in enumerate(request["fds"]):
            fd = next(received) if present else os.open(os.devnull, os.O_RDWR)
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.umask(int(request["umask"]))
        sys.argv[:] = request["argv"]
        sys.path[:] = request["path"]
        for name in [m for m in sys.modules if m == "unie" or m.startswith("unie.")]:
            del sys.modules[name]  # the server's (it runs as unie.pipeline.warm): the job imports its own, by its path
        import runpy

        code = 0
        try:
            runpy.run_path(request["script"], run_name="__main__")
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            import traceback

            traceback.print_exc()
            _end_child()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        _end_child()
    finally:
        os._exit(code)


def _end_child() -> None:
    """What Python does at exit: wait for the script's non-daemon threads, run its exit functions, flush."""
    import atexit
    import threading

    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


# ------------------------------------------------------------------------------------------------- the server
def serve(path: str, lm_eval: bool = True) -> None:
    """The server's loop (module doc): import :data:`PRELOAD`, listen on ``path``, then (``lm_eval``) import
    :data:`PRELOAD_READING_ENV` while no job waits, and fork a child per request until SIGTERM (after the children
    running then end) or :data:`IDLE_SECONDS` without a job."""
    import importlib
    import selectors
    import time

    imported_with = import_env(os.environ)  # before the imports: huggingface_hub sets one (HF_XET_HIGH_PERFORMANCE)

    def load(name):
        try:
            importlib.import_module(name)
        except ImportError:
            pass

    for name in PRELOAD:
        load(name)
    # the socket appears listening once torch is in; a job that starts before waits for it (_server_address)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)
    print(f"{_now()} ready at {time.time():.3f}", file=sys.stderr, flush=True)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "listen")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    children: dict[int, socket.socket] = {}  # child pid -> its client's connection
    # imported once the server is ready, one at a time while no request waits: a job forked before imports them itself
    later = list(PRELOAD_READING_ENV) if lm_eval else []
    last = time.monotonic()
    try:
        while True:
            if stopping and listener.fileno() != -1:  # no new job; those running end first
                sel.unregister(listener)
                listener.close()
            if stopping and not children:
                break
            if not children and time.monotonic() - last > IDLE_SECONDS:
                break
            events = sel.select(timeout=0.05 if later else 5.0)
            if not events and later:  # idle: the next of the later modules (a job arriving meanwhile waits for it)
                load(later.pop(0))
                if not later:
                    print(f"{_now()} imported {', '.join(PRELOAD_READING_ENV)}", file=sys.stderr, flush=True)
                continue
            for key, _ in events:
                if key.data == "wake":
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                elif key.data == "listen":
                    conn, _ = listener.accept()
                    pid = _fork_job(conn, sel, wake_w, imported_with)
                    if pid is not None:
                        children[pid] = conn
                        sel.register(conn, selectors.EVENT_READ, pid)
                else:  # a client's connection: readable only when it closed (the client is gone)
                    pid = key.data
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            while children:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = children.pop(pid, None)
                if conn is not None:
                    sel.unregister(conn)
                    _last_word(conn, {"status": status})
                last = time.monotonic()
    finally:
        listener.close()
        _remove_folder(path)  # here too: a run killed with -9 never calls stop


def _now() -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S")


def _last_word(conn: socket.socket, obj) -> None:
    """Send ``obj`` to a client as the server's last message on ``conn`` (a client already gone is no error), then close
    it."""
    try:
        _send(conn, obj)
    except OSError:
        pass
    conn.close()


def _decline(conn: socket.socket, fds: list[int]) -> None:
    """Answer a request the server does not take (the client then runs its job itself) and let go of its streams."""
    for fd in fds:
        os.close(fd)
    _last_word(conn, {"pid": None})


def _fork_job(conn: socket.socket, sel, wake_w: int, imported_with: dict) -> int | None:
    """Read one request from ``conn`` and fork its child; the child's pid, or None (a bad request, or a job whose
    :func:`import_env` differs from ``imported_with``, the server's own before it imported: the client runs the job
    itself).  ``sel``: the server's selector (its listener, wake-up pipe and clients' connections); ``wake_w``: the
    pipe's other end (its signals' wake-up)."""
    conn.settimeout(10.0)
    try:
        request, fds = _recv(conn, with_fds=3)
    except (OSError, ValueError, ConnectionError):
        conn.close()
        return None
    if not isinstance(request, dict) or not isinstance(request.get("env"), dict):
        return _decline(conn, fds)
    differ = sorted({k for k, _ in set(import_env(request["env"]).items()) ^ set(imported_with.items())})
    if differ:
        print(
            f"{_now()} not taken: {request['cwd']} {os.path.basename(request['script'])}: {', '.join(differ)} differ"
            " from the values the server imported with",
            file=sys.stderr,
            flush=True,
        )
        return _decline(conn, fds)
    conn.settimeout(None)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the server's but the modules
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for key in list(sel.get_map().values()):
            fileobj = key.fileobj
            fileobj.close() if hasattr(fileobj, "close") else os.close(fileobj)
        sel.close()
        conn.close()
        os.close(wake_w)
        _run_child(request, fds)
    for fd in fds:
        os.close(fd)
    print(f"{_now()} job {pid}: {request['cwd']} {os.path.basename(request['script'])}", file=sys.stderr, flush=True)
    try:
        _send(conn, {"pid": pid})
    except OSError:  # the client left: so does its job
        os.kill(pid, signal.SIGKILL)
    return pid


# ------------------------------------------------------------------------------------------------- the run's side
def start(run_dir: str, rules=None):
    """From the Snakefile's ``onstart`` (local executor, main process): start the run's server and point every job at
    it (:data:`ADDRESS` in this process's environment, which the jobs inherit).  ``rules``: the rule of each job the
    run will run (None: unknown), whence :func:`wants_later`.  Returns the server's process, or None when switched off
    (``UNIE_WARM=0``) or when no job of ``rules`` would use it (:func:`wants_server`)."""
    import subprocess
    import tempfile

    if os.environ.get(OFF) == "0" or (rules is not None and not wants_server(rules)):
        return None
    folder = tempfile.mkdtemp(prefix="unie-warm-")  # a short path: a Unix socket's is at most 107 bytes
    path = os.path.join(folder, "socket")
    log = os.path.join(run_dir, "logs", "warm-server.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in (ADDRESS, CHILD, STARTED)}
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "unie.pipeline.warm", "serve", path]
            + ([] if rules is None or wants_later(rules) else ["--torch-only"]),
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            cwd="/",  # a child takes its job's directory; the server holds none
            start_new_session=True,  # no signal of the terminal's or of Snakemake's process group reaches it
            env=env,
        )
    os.environ[ADDRESS] = f"{socket.gethostname()}\t{path}\t{proc.pid}"
    proc.folder = folder
    return proc


def stop(proc) -> None:
    """From ``onsuccess``/``onerror``: the server ends (after any job still running) and no job looks for it."""
    os.environ.pop(ADDRESS, None)
    if proc is None:
        return
    try:
        proc.terminate()
        proc.wait(timeout=10)
    except Exception:  # it ends by itself when idle
        pass
    if proc.poll() is not None:  # ended (one stopped while it imported left its folder); else it removes it itself
        _remove_folder(os.path.join(proc.folder, "socket"))


def _remove_folder(path: str) -> None:
    """The socket's folder (made by :func:`start`), with whatever socket file is left in it."""
    import shutil

    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "serve" and sys.argv[3:] in ([], ["--torch-only"]):
        serve(sys.argv[2], lm_eval=sys.argv[3:] != ["--torch-only"])
    else:
        sys.exit("usage: python -m unie.pipeline.warm serve SOCKET [--torch-only]")
