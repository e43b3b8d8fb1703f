"""The soak's load: its job, the worker processes that run it, the producer that adds it.

Each worker is a process of its own, ``python -m benchmarks.soak --worker-process SPEC`` (the
command hands it to :func:`worker_main`), as a deployment would run them; the producer is a
thread of the command's process. Nothing here reads the measurements.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

import pgqueue

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "default"


# -- the job ----------------------------------------------------------------------------------

# Seconds each job sleeps: 0 in the soak (a trivial job); set in the worker processes of
# --overload drain (from --job-ms), so that the workers drain less than the producer adds.
_JOB_SECONDS = 0.0


@dataclass
class SoakJob(pgqueue.Worker):
    """The soak's job: records nothing (its row's timestamps are the measurement)."""

    kind = "bench.soak"
    i: int

    def process(self, ctx: pgqueue.JobContext) -> None:
        """Do nothing, or sleep ``--job-ms`` (``--overload drain``)."""
        if _JOB_SECONDS:
            time.sleep(_JOB_SECONDS)


registry = pgqueue.WorkerRegistry(SoakJob)


# -- the worker processes -----------------------------------------------------------------------


def worker_main(spec: dict[str, Any]) -> None:
    """One worker process (``--worker-process SPEC``): run jobs until SIGTERM."""
    global _JOB_SECONDS
    _JOB_SECONDS = spec["job_ms"] / 1000
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    config = pgqueue.RuntimeConfig(
        completed_retention=spec["completed_retention"],
        cleanup_batch=spec["cleanup_batch"],
        leader_interval=spec["leader_interval"],
    )
    with pgqueue.Client.connect(spec["url"], registry=registry) as client:
        client.start({QUEUE: spec["concurrency"]}, config=config)
        while not stop.wait(0.5):
            pass
        client.stop(5.0)


@contextlib.contextmanager
def workers(url: str, args: argparse.Namespace, log_dir: Path) -> Iterator[list[Any]]:
    """Start ``args.workers`` worker processes; yield them; SIGTERM them at the end."""
    spec = {
        "url": url,
        "concurrency": args.concurrency,
        "completed_retention": args.completed_retention,
        "cleanup_batch": args.cleanup_batch,
        "leader_interval": args.leader_interval,
        "job_ms": args.job_ms,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for n in range(args.workers):
            log = log_dir / f"worker-{n}.log"
            with open(log, "wb") as out:
                procs.append(
                    (
                        subprocess.Popen(
                            [
                                *(sys.executable, "-m", "benchmarks.soak"),
                                *("--worker-process", json.dumps(spec)),
                            ],
                            cwd=ROOT,
                            env=env,
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=out,
                            start_new_session=True,
                        ),
                        log,
                    )
                )
        yield procs
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode not in (0, -signal.SIGTERM):
                print(f"--- worker exited with {proc.returncode}; its log:\n{log.read_text()}")


def wait_registered(conn: psycopg.Connection[Any], count: int, procs: list[Any]) -> None:
    """Wait until ``count`` worker processes have registered (and one of them leads)."""
    deadline = time.monotonic() + 60
    while True:
        for proc, log in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a worker process exited:\n{log.read_text()}")
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE is_leader) FROM pgqueue_instances"
        ).fetchone()
        if row and row[0] >= count and row[1] >= 1:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the workers did not register in 60 s: {row}")
        time.sleep(0.2)


# -- the producer -----------------------------------------------------------------------------


class Producer(threading.Thread):
    """Adds ``rate`` jobs/s for ``duration`` s, a batch every ``tick`` s, paced on the clock.

    Each batch adds what the wall clock says is due (``rate * elapsed`` minus what was added),
    so a late batch catches up and the rate over the run is the one asked for.
    """

    def __init__(self, url: str, rate: float, duration: float, tick: float = 0.1) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.url, self.rate, self.duration, self.tick = url, rate, duration, tick
        self.enqueued = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.ready = threading.Event()  # set once started_at is
        self.started_at = self.ended_at = 0.0
        self.batches = self.late_batches = 0
        self.max_lag = 0.0
        self._lock = threading.Lock()
        self._calls: list[float] = []  # add_jobs durations (s) since the last take_calls()

    def take_calls(self) -> list[float]:
        """The ``add_jobs`` durations (s) since the previous call."""
        with self._lock:
            calls, self._calls = self._calls, []
        return calls

    def run(self) -> None:
        try:
            with pgqueue.Client.connect(self.url, registry=registry) as client:
                self._produce(client)
        except BaseException as exc:  # the main thread raises it
            self.error = exc
        finally:
            self.ended_at = time.monotonic()
            self.ready.set()

    def _produce(self, client: pgqueue.Client) -> None:
        start = self.started_at = time.monotonic()
        self.ready.set()
        tick = 0
        while not self.stopping.is_set():
            elapsed = min(time.monotonic() - start, self.duration)
            due = int(self.rate * elapsed) - self.enqueued
            if due > 0:
                first = self.enqueued
                t0 = time.perf_counter()
                client.add_jobs([SoakJob(i) for i in range(first, first + due)])
                spent = time.perf_counter() - t0
                with self._lock:
                    self.enqueued += due
                    self._calls.append(spent)
                self.batches += 1
            if elapsed >= self.duration:
                return
            tick += 1
            lag = time.monotonic() - (start + tick * self.tick)
            if lag < 0:
                self.stopping.wait(-lag)
            else:
                self.max_lag = max(self.max_lag, lag)
                self.late_batches += 1
