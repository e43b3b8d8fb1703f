"""One measured step, in a process of its own: ``python -m benchmarks.role SUBJECT ACTION ...``.

The harness (``benchmarks/run.py``) starts one of these per step so that every library runs in
a fresh interpreter, and reads the JSON it prints (or, for workers, writes to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

from .subjects.registry import make_subject


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("subject")
    parser.add_argument(
        "action",
        choices=[
            "install",
            "enqueue-single",
            "enqueue-bulk",
            "enqueue-batches",
            "enqueue-concurrent",
            "enqueue-spaced",
            "fill-finished",
            "remaining",
            "worker",
        ],
    )
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("-n", type=int, default=0)
    parser.add_argument("--spacing", type=float, default=0.02)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000, help="jobs per enqueue-batches call")
    parser.add_argument("--producers", type=int, default=10, help="enqueue-concurrent producers")
    parser.add_argument(
        "--until-empty",
        action="store_true",
        help="worker: run until no job is left (subjects with ends_when_empty), print "
        "'empty <time>', then wait for SIGTERM as usual",
    )
    parser.add_argument("--out")
    parser.add_argument("--sample-rss", type=float, default=0.0, help="seconds between samples")
    parser.add_argument(
        "--compact",
        type=int,
        default=0,
        help="expect jobs 0..N-1 and count them in a preallocated array instead of keeping a "
        "record per job (so that a memory measurement does not measure the records)",
    )
    args = parser.parse_args()
    subject = make_subject(args.subject, args.dsn)
    result: dict[str, object] = {}

    if args.action == "install":
        subject.install()
    elif args.action == "enqueue-single":
        result["seconds"] = subject.enqueue_single(args.start, args.n)
    elif args.action == "enqueue-bulk":
        result["seconds"] = subject.enqueue_bulk(args.start, args.n)
    elif args.action == "enqueue-batches":
        result["seconds"] = subject.enqueue_batches(args.start, args.n, args.batch)
    elif args.action == "enqueue-concurrent":
        result["seconds"] = subject.enqueue_concurrent(args.start, args.n, args.producers)
    elif args.action == "enqueue-spaced":
        result["commits"] = subject.enqueue_spaced(args.start, args.n, args.spacing)
    elif args.action == "fill-finished":
        subject.fill_finished(args.n)
    elif args.action == "remaining":
        result["remaining"] = subject.remaining()
    elif args.action == "worker":
        run_worker(subject, args)
        return
    print(json.dumps(result), flush=True)


def run_worker(subject, args) -> None:  # type: ignore[no-untyped-def]
    records: list[tuple[int, float]] = []
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    rss: list[tuple[float, int, int]] = []  # (time, jobs done, bytes)

    counts = bytearray(args.compact)
    first: list[float] = []
    done = [0]

    def record(i: int) -> None:
        records.append((i, time.time()))

    def count(i: int) -> None:
        if not first:
            first.append(time.time())
        done[0] += 1
        if 0 <= i < len(counts) and counts[i] < 255:
            counts[i] += 1
        else:
            records.append((i, time.time()))

    if args.sample_rss:

        def sample() -> None:
            while not stop.wait(args.sample_rss):
                rss.append((time.time(), done[0] or len(records), _rss_bytes()))

        threading.Thread(target=sample, daemon=True).start()
    # Tell the harness we are up (imports done), then work until told to stop.
    print("ready", flush=True)

    def emptied() -> None:
        # the drain's end, told before the worker closes its connections (so that the harness
        # reads the CPU of their PostgreSQL backends while they still exist)
        print(f"empty {time.time()!r}", flush=True)

    subject.run_worker(
        args.concurrency,
        count if args.compact else record,
        stop,
        emptied=emptied if args.until_empty else None,
    )
    with open(args.out, "w") as f:
        json.dump({"records": records, "rss": rss, "counts": counts.hex(), "first": first[:1]}, f)


if __name__ == "__main__":
    sys.exit(main())
