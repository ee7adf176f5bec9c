"""Env workers as local processes (``spawn``/``forkserver``), restarted when they die or hang.

A worker's log records (an environment's warnings, a library's) travel to the
driver over a pipe of their own and are handled there by the logger of the
same name, so they reach the console and the run's ``run.log`` like the
driver's records; a spawned process starts with no handlers and would print
them bare to stderr. One pipe per worker, written synchronously, read by one
thread that ends at the pipe's end of file: a record is in the pipe before
the worker replies, and a worker killed mid-write (a hang) cannot block the
others, which a shared queue's lock could.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import threading
from logging.handlers import QueueHandler
from typing import Any

from sand_framework.components import Environment
from sand_framework.errors import EnvWorkerError
from sand_framework.rollout.remote import RemotePool
from sand_framework.rollout.worker import EnvHost


class _PipeWriter:
    """The one queue method :class:`~logging.handlers.QueueHandler` calls, on a pipe's sending end."""

    def __init__(self, conn: Any):
        self.put_nowait = conn.send


def _log_to_pipe(conn: Any, level: int) -> None:
    """In a worker: every record at ``level`` and above, and every ``warnings.warn``, is sent to the driver."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(QueueHandler(_PipeWriter(conn)))  # prepare(): message formatted, traceback as text
    root.setLevel(level)
    logging.captureWarnings(True)


def _relay_records(conn: Any) -> None:
    """In the driver, one thread per worker: hand each record to its logger until the worker is gone."""
    while True:
        try:
            record = conn.recv()
        except (EOFError, OSError):  # the worker exited or was killed (a record cut off mid-write included)
            break
        except Exception:  # noqa: BLE001 - a record that does not unpickle is dropped, the rest still come
            continue
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)
    conn.close()


def _worker_main(conn: Any, blob: dict[str, Any], log_conn: Any = None, log_level: int = logging.INFO) -> None:
    """Entry point of a pool process: serve operation batches until told to stop."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if log_conn is not None:
        _log_to_pipe(log_conn, log_level)
    host = EnvHost(blob)
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            if msg is None:
                break
            conn.send(host.run(msg))
    finally:
        host.close()


class _Worker:
    def __init__(self, ctx: Any, blob: dict[str, Any]):
        self.conn, child = ctx.Pipe()
        log_recv, log_send = ctx.Pipe(duplex=False)
        level = logging.getLogger().getEffectiveLevel()
        self.proc = ctx.Process(target=_worker_main, args=(child, blob, log_send, level), daemon=True)
        self.proc.start()
        child.close()
        log_send.close()  # the worker holds the only sending end: its exit is the relay's end of file
        self.relay = threading.Thread(target=_relay_records, args=(log_recv,), daemon=True,
                                      name=f"env-worker-log-{self.proc.pid}")
        self.relay.start()
        self.answered = False
        """Until its first reply a worker is still starting (interpreter, plugins, a JVM): not hung."""

    def stop(self, timeout: float = 10.0) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        self.conn.close()
        self.relay.join(5)  # the worker's last records are handled before the pool reports it closed


class ProcessEnvPool(RemotePool):
    """Environments held warm in ``workers`` local processes (``spawn``/``forkserver``), stepped in parallel.

    A worker that dies, or that has not answered after ``timeout_s`` (a hung
    environment: a JVM stuck in a step), is killed and restarted, and the
    operations it had been sent are sent again; the fresh worker replays each
    episode from the driver's history (``faults_survived`` counts restarts,
    ``hangs`` the ones caused by a timeout, ``max_restarts`` bounds them per call).
    """

    def __init__(self, prototype: Environment, workers: int = 2, start_method: str = "spawn",
                 max_restarts: int = 3, timeout_s: float | None = 300.0, startup_timeout_s: float = 180.0):
        super().__init__(prototype, workers)
        self.ctx = mp.get_context(start_method)
        self.max_restarts = max_restarts
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        """A fresh worker's first call also pays for its start-up (a JVM under load can take minutes)."""
        self.counters["hangs"] = 0
        self.workers: list[_Worker | None] = [None] * self.n_workers

    def worker(self, w: int) -> _Worker:
        if self.workers[w] is None:
            self.workers[w] = _Worker(self.ctx, self.blob)
        return self.workers[w]  # type: ignore[return-value]

    def pids(self) -> list[int | None]:
        return [w.proc.pid if w is not None else None for w in self.workers]

    def _restart(self, w: int) -> None:
        old = self.workers[w]
        if old is not None:
            try:
                old.proc.kill()
            except Exception:  # noqa: BLE001
                pass
            old.proc.join(5)
            old.conn.close()
        self.workers[w] = None
        self.counters["faults_survived"] += 1

    def _dispatch(self, batches: dict[int, list[tuple]]) -> dict[int, list[Any]]:
        replies: dict[int, list[Any]] = {}
        pending = dict(batches)
        for _attempt in range(self.max_restarts + 1):
            sent: list[int] = []
            for w, ops in pending.items():
                try:
                    self.worker(w).conn.send(ops)
                    sent.append(w)
                except (OSError, ValueError):
                    self._restart(w)
            for w in sent:
                worker = self.worker(w)
                conn = worker.conn
                try:
                    if self.timeout_s is not None:
                        limit = self.timeout_s if worker.answered else max(self.timeout_s, self.startup_timeout_s)
                        if not conn.poll(limit):
                            self.counters["hangs"] += 1
                            self._restart(w)
                            continue
                    replies[w] = conn.recv()
                    worker.answered = True
                except (EOFError, OSError):
                    self._restart(w)
            pending = {w: ops for w, ops in pending.items() if w not in replies}
            if not pending:
                return replies
        raise EnvWorkerError(f"env worker(s) {sorted(pending)} kept dying or hanging ({self.max_restarts} restarts "
                             f"within one call, timeout {self.timeout_s}s): the environment itself is failing; "
                             "the run can be resumed once it is fixed")

    def close(self) -> None:
        for w in self.workers:
            if w is not None:
                w.stop()
        self.workers = [None] * self.n_workers
        self.history.clear()
