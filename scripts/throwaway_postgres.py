"""A throwaway PostgreSQL server in a temporary folder, reached by a unix socket there, for the server tests
(tests/conftest.py's ``pg_server``) and benchmarks/tuning_db.py. PostgreSQL refuses to run as root: as root the
server runs as the user ``postgres`` (Debian's package makes it).

    python scripts/throwaway_postgres.py [--tls]    # starts one, prints its URL; Enter, Ctrl-C or SIGTERM stops it

Run it in the background with ``python scripts/throwaway_postgres.py > url.txt &``
and stop it with ``kill %1``; it stops the server and deletes its folder
either way. A process that made a server and died without removing it (kill -9,
a killed pytest) leaves none behind: a watchdog started with the server
(``--watch``, reading a pipe only its maker and the maker's forked children
hold) stops it, even stopped (SIGSTOP), and deletes its folder when that
pipe closes. Needs PostgreSQL's server programs
(``apt install postgresql``).
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path


class Unavailable(RuntimeError):
    """No server can be started here (the reason says why)."""


def bindir() -> Path | None:
    """The folder of the PATH's (or Debian's newest) PostgreSQL server programs, or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name))
    return Path(dirs[-1]) if dirs and (Path(dirs[-1]) / "initdb").exists() else None


class PostgresServer:
    """A PostgreSQL server in ``root`` (data in ``root/data``, the socket in ``root``), trust authentication."""

    def __init__(self, bindir: Path, root: Path, run_as: list, tls_port: int | None = None):
        self.bindir, self.root, self.run_as = bindir, root, run_as
        self.data, self.socket = root / "data", root
        self.tls_port = tls_port                 # also on 127.0.0.1:tls_port with TLS (a self-signed certificate)
        self._watchdog = None                    # the process that removes this server once its maker is gone

    @classmethod
    def make(cls, tls: bool = False) -> "PostgresServer":
        """A new server, initialised and started; with ``tls``, also listening
        on a free loopback port with TLS (``cert.pem``, self-signed for
        ``localhost``, in its folder: the root certificate a client verifies).

        Raises
        ------
        Unavailable
            No server programs, or root with no user ``postgres`` to run as.
        """
        programs = bindir()
        if programs is None:
            raise Unavailable("no PostgreSQL server programs (initdb, pg_ctl): apt install postgresql")
        root = Path(tempfile.mkdtemp(prefix="costlearn-pg-"))
        run_as = []
        if os.geteuid() == 0:
            import pwd
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(root, ignore_errors=True)
                raise Unavailable("running as root and no user 'postgres' to run the server as "
                                  "(PostgreSQL refuses root)") from None
            os.chown(root, pw.pw_uid, pw.pw_gid)
            run_as = ["runuser", "-u", "postgres", "--"]
        server = cls(programs, root, run_as, _free_port() if tls else None)
        server._watchdog = server._watch()
        try:
            server.init()
            server.start()
        except BaseException:
            server.remove()
            raise
        return server

    def _watch(self) -> subprocess.Popen:
        """A process of its own session that waits for this process's end
        (its stdin, a pipe only this process writes, reaches end of file:
        at :meth:`remove`, at exit, or when the process is killed), then
        stops the server and deletes its folder."""
        return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--watch", str(self.root),
                                 str(self.bindir), *self.run_as], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def _cmd(self, *args, check=True):
        return subprocess.run([*self.run_as, *map(str, args)], check=check, capture_output=True, text=True,
                              timeout=120)

    def init(self) -> None:
        self._cmd(self.bindir / "initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                  "--no-sync")

    def start(self) -> None:
        # dynamic shared memory as files of the data folder, deleted with it: POSIX segments (/dev/shm) of a
        # server that was killed, as the tests kill servers, outlived it
        opts = f"-k {self.socket} -c fsync=off -c max_connections=200 -c dynamic_shared_memory_type=mmap"
        if self.tls_port is None:
            opts += " -c listen_addresses=''"
        else:
            if not (self.data / "server.key").exists():
                self._cmd("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                          "/CN=localhost", "-keyout", self.data / "server.key", "-out", self.data / "server.crt")
                self._cmd("chmod", "600", self.data / "server.key")
                shutil.copy(self.data / "server.crt", self.root / "cert.pem")
            opts += f" -c listen_addresses=127.0.0.1 -p {self.tls_port} -c ssl=on"
        self._cmd(self.bindir / "pg_ctl", "-D", self.data, "-l", self.root / "log", "-w", "-t", "60", "-o", opts,
                  "start")

    def ensure_running(self) -> None:
        if self._cmd(self.bindir / "pg_ctl", "-D", self.data, "status", check=False).returncode != 0:
            self.start()

    def stop(self, mode: str = "immediate") -> None:
        """``pg_ctl stop -m immediate``: the server dies as in a crash, mid-transaction."""
        self._cmd(self.bindir / "pg_ctl", "-D", self.data, "-m", mode, "-w", "stop", check=False)

    def remove(self) -> None:
        """Stop the server and delete its folder; its watchdog ends."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        if self._watchdog is not None:
            try:
                self._watchdog.stdin.write(b"removed")
                self._watchdog.stdin.close()
            except BrokenPipeError:                 # the watchdog is gone already
                pass
            self._watchdog.wait(timeout=60)

    def url(self, database: str = "postgres", user: str = "postgres", password: str | None = None) -> str:
        auth = user + (f":{password}" if password else "")
        if self.tls_port is not None:
            return f"postgresql://{auth}@/{database}?host={self.socket}&port={self.tls_port}"
        return f"postgresql://{auth}@/{database}?host={self.socket}"

    def tls_url(self, database: str = "postgres", user: str = "postgres", sslmode: str = "verify-full") -> str:
        """A URL over loopback TCP with TLS, the certificate verified against ``cert.pem``."""
        return (f"postgresql://{user}@localhost:{self.tls_port}/{database}?sslmode={sslmode}"
                f"&sslrootcert={self.root / 'cert.pem'}")

    def execute(self, sql: str, database: str = "postgres", params=None):
        import psycopg
        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else None

    def new_database(self) -> str:
        name = "t" + uuid.uuid4().hex[:12]
        self.execute(f"CREATE DATABASE {name}")
        return name


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ABSENT_S = 3.0
"""Seconds the watchdog sees a server's folder gone before it ends: a maker
killed while ``initdb`` or ``pg_ctl start`` ran leaves that child running,
and it may make the folder again after a first removal."""


def watch(root: Path, programs: Path, run_as: list) -> None:
    """The watchdog of :meth:`PostgresServer._watch`: wait for end of file on
    stdin, then stop the server in ``root`` and delete ``root``. Where the
    maker did not say it removed them (``removed`` on the pipe: it died),
    again until the folder has stayed gone :data:`ABSENT_S` seconds (at
    most two minutes); a child of the maker that still uses the server
    keeps the pipe open, and the server, until it exits."""
    import signal
    import time
    signal.signal(signal.SIGINT, signal.SIG_IGN)         # a Ctrl-C of the maker's terminal is the maker's to act on
    removed = False
    while data := sys.stdin.buffer.read(4096):
        removed = removed or b"removed" in data             # the maker removed it (PostgresServer.remove)
    gone_since, give_up = None, time.monotonic() + (0 if removed else 120)
    if removed and root.exists():                          # what remove() could not: once more, then done
        _stop_hard(root, programs, run_as)
        shutil.rmtree(root, ignore_errors=True)
    while time.monotonic() < give_up:
        if root.exists():
            gone_since = None
            _stop_hard(root, programs, run_as)
            shutil.rmtree(root, ignore_errors=True)
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since >= ABSENT_S:
            return
        time.sleep(0.2)


def _stop_hard(root: Path, programs: Path, run_as: list) -> None:
    """Stop the server of ``root`` whatever its state: its processes woken
    (a stopped postmaster or backend cannot shut down), ``pg_ctl stop -m
    immediate``, then SIGKILL to whichever of them still runs."""
    import signal
    processes = _server_processes(root)
    for pid in processes:
        _signal(pid, signal.SIGCONT)
    if (root / "data").is_dir():
        subprocess.run([*run_as, str(programs / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "-w", "-t",
                        "30", "stop"], capture_output=True, timeout=120, check=False)
    for pid in processes:
        if _is_server_process(pid, root, processes[0]):
            _signal(pid, signal.SIGKILL)


def _server_processes(root: Path) -> list:
    """The postmaster of ``root``'s data folder (its ``postmaster.pid``) and
    its children, by Linux's /proc; empty where none runs or there is no
    /proc."""
    try:
        postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    if not _is_server_process(postmaster, root, postmaster):
        return []
    children = [int(d) for d in os.listdir("/proc") if d.isdigit() and _parent(int(d)) == postmaster]
    return [postmaster, *children]


def _is_server_process(pid: int, root: Path, postmaster: int) -> bool:
    """Whether ``pid`` still is the postmaster of ``root`` or a child of it (not a process that took its number)."""
    if pid != postmaster:
        return _parent(pid) == postmaster
    try:
        return str(root / "data") in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def main(argv=None) -> int:
    import argparse
    import signal
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--watch"]:
        watch(Path(argv[1]), Path(argv[2]), argv[3:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tls", action="store_true", help="also listen on loopback with TLS; print that URL too")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))     # kill: stop the server and delete its folder
    server = PostgresServer.make(tls=args.tls)
    try:
        name = server.new_database()
        print(server.url(name), flush=True)
        if args.tls:
            print(server.tls_url(name), flush=True)
        print("running; Enter, Ctrl-C or SIGTERM stops it and deletes its folder", file=sys.stderr, flush=True)
        try:
            if not sys.stdin.isatty() and not sys.stdin.readline():
                signal.pause()                      # stdin closed (run in the background): wait for a signal
            elif sys.stdin.isatty():
                input()
        except (KeyboardInterrupt, EOFError):
            pass
    finally:
        server.remove()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
