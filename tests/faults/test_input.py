"""Bad and heavy input against running workers: poison rows, hostile names, NUL bytes, huge
payloads, and a thousand enqueuers at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

import pgqueue
from pgqueue.names import MAX_QUEUE_LENGTH
from tests.faults import jobs
from tests.faults.harness import ROOT, Fleet, ModeClient, deadline_loop


@dataclass
class FromANewerDeploy(pgqueue.Worker):
    """A kind no worker of this deploy knows."""

    kind = "fault.from_a_newer_deploy"

    def process(self, ctx: pgqueue.JobContext) -> None:
        raise AssertionError("never runs here")


def test_poison_rows(fleet: Fleet) -> None:
    # Rows as another client (an older deploy, another language, a hand-written INSERT) could
    # leave them, in the table before any worker starts.
    t = fleet.jobs_table
    missing_field = fleet.add(1, job=jobs.Needs, x=1)[0]
    not_an_object = fleet.add(1, job=jobs.Needs, x=2)[0]
    unknown_field = fleet.add(1, job=jobs.Needs, x=3)[0]
    fleet.observer.rows(f"UPDATE {t} SET payload = '{{}}' WHERE id = $1", (missing_field,))
    fleet.observer.rows(f"UPDATE {t} SET payload = '[1, 2]' WHERE id = $1", (not_an_object,))
    fleet.observer.rows(
        f"""UPDATE {t} SET payload = '{{"x": 3, "surprise": true}}' WHERE id = $1""",
        (unknown_field,),
    )
    assert fleet.client is not None
    unknown_kind = fleet.client.add_job(FromANewerDeploy()).id
    hostile_kind = fleet.add(1)[0]
    hostile = "fault.work'; DROP TABLE pgqueue_jobs; --" + "\u2603" * 5000
    fleet.observer.rows(f"UPDATE {t} SET kind = $1 WHERE id = $2", (hostile, hostile_kind))
    good = fleet.add(50)
    worker = fleet.start()
    fleet.wait_final([missing_field, not_an_object, unknown_field, *good], 30)
    for job_id in (missing_field, not_an_object, unknown_field):
        row = fleet.observer.rows(
            f"SELECT status, attempts, last_error FROM {t} WHERE id = $1", (job_id,)
        )[0]
        assert row[:2] == ("failed", 1), row
        assert "cannot build" in row[2], row
    # kinds this process cannot run are never claimed (nor stuck in processing)
    assert fleet.statuses([unknown_kind, hostile_kind]) == {
        unknown_kind: "pending",
        hostile_kind: "pending",
    }
    assert fleet.observer.value(f"SELECT to_regclass('{fleet.schema}.pgqueue_jobs')::text")
    assert worker.alive()
    fleet.stop_all()
    fleet.check_invariants(
        {
            missing_field: "failed",
            not_an_object: "failed",
            unknown_field: "failed",
            unknown_kind: "pending",
            hostile_kind: "pending",
        }
    )
    fleet.check_no_leaks()
    fleet.check_logs()


def test_a_thousand_concurrent_enqueuers(fleet: Fleet, tmp_path) -> None:
    workers = [fleet.start(queues="default=8"), fleet.start(queues="default=8")]
    fleet.wait_ready(*workers)
    env = {**os.environ, "FAULT_DSN": fleet.base_url, "PGQUEUE_SCHEMA": fleet.schema}
    outs = [tmp_path / f"enqueued-{i}.json" for i in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.faults.enqueuers", fleet.mode, "250", str(out)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for out in outs
    ]
    peak = 0
    for _ in deadline_loop(120, "the enqueuers finished", 0.05):
        peak = max(
            peak,
            fleet.observer.value(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            ),
        )
        if all(p.poll() is not None for p in procs):
            break
    for p in procs:
        output = p.stdout.read().decode() if p.stdout else ""
        assert p.returncode == 0, output
    ids = [i for out in outs for i in json.loads(out.read_text())]
    assert len(ids) == len(set(ids)) == 1000
    fleet.committed.update(ids)
    fleet.wait_final(ids, 120)
    # each enqueuing process used its pool, not a connection per caller
    assert peak < 100, f"{peak} sessions at the peak"
    fleet.stop_all()
    fleet.check_invariants()
    assert (
        fleet.observer.value(
            f"SELECT count(*) FROM {fleet.runs_table} WHERE job_id = ANY($1)", (ids,)
        )
        == 1000
    )  # exactly once: no fault here
    fleet.check_no_leaks()
    fleet.check_logs()


HOSTILE_QUEUES = [
    "x'; DROP TABLE pgqueue_jobs; --",
    'quote"d',
    "a" * 65,
    "sp ace",
    "nul\x00byte",
    "\u2603",
    "-leading-dash",
]


def refused_by_cli(fleet: Fleet, message: str, *args: str) -> None:
    """``pgqueue *args`` exits 1 with ``message`` and no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "pgqueue", *args],
        cwd=ROOT,
        env={**os.environ, "PGQUEUE_DSN": fleet.base_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_hostile_and_oversize_names(fleet: Fleet) -> None:
    # refused by the command line, with a clear message and no traceback
    for queue in HOSTILE_QUEUES[:4]:
        refused_by_cli(
            fleet,
            "invalid queue name",
            "worker",
            "tests.faults.jobs:registry",
            f"--queues={queue}=1",
            f"--schema={fleet.schema}",
        )
    for schema in ["public; DROP SCHEMA public", "Caps", "x" * 64]:
        refused_by_cli(fleet, "invalid schema", "migrate", f"--schema={schema}")
    # refused at enqueue by the mode's own client; nothing written
    client = ModeClient(fleet)
    try:
        for queue in HOSTILE_QUEUES:
            with pytest.raises(pgqueue.InvalidName, match="invalid queue name"):
                client.add_job(jobs.Work(), queue=queue)
        # the longest legal names, with every punctuation mark allowed, round-trip
        longest = "q.1:a-b_" + "z" * 56
        assert len(longest) == MAX_QUEUE_LENGTH
        job = client.add_job(jobs.Work(tag="longest queue"), queue=longest)
        fleet.committed.add(job.id)
    finally:
        client.close()
    assert fleet.observer.value(f"SELECT count(*) FROM {fleet.jobs_table}") == 1
    worker = fleet.start(queues=f"{longest}=1")
    fleet.wait_final(fleet.committed, 30)
    assert (
        fleet.observer.value(f"SELECT queue FROM {fleet.jobs_table} WHERE id = $1", (job.id,))
        == longest
    )
    assert worker.alive()
    fleet.stop_all()
    fleet.check_invariants()
    fleet.check_no_leaks()
    fleet.check_logs()


def test_nul_bytes_and_huge_payloads(fleet: Fleet) -> None:
    client = ModeClient(fleet)
    try:
        for bad in ["nul \x00 inside", "\x00"]:
            with pytest.raises(pgqueue.JobSerializationError, match="NUL"):
                client.add_job(jobs.Work(tag=bad))
        with pytest.raises(pgqueue.JobSerializationError):
            client.add_job(jobs.Work(sleep=float("nan")))
        with pytest.raises(pgqueue.PayloadTooLarge, match="max_payload_bytes"):
            client.add_job(jobs.Work(blob="x" * (2 * 1024 * 1024)))
        # what looks like an escape, but is text, round-trips exactly
        lookalike = "\\u0000 and \\\\u0000 and \u2603"
        escaped = client.add_job(jobs.Work(tag=lookalike)).id
        fleet.committed.add(escaped)
    finally:
        client.close()
    # the refused ones left nothing behind
    assert fleet.observer.value(f"SELECT count(*) FROM {fleet.jobs_table}") == 1
    # a large payload within the limit, and a huge one written past the API (30 MB)
    big = fleet.add(1, blob="y" * (900 * 1024))[0]
    huge = fleet.add(1, tag="huge")[0]
    fleet.observer.rows(
        f"UPDATE {fleet.jobs_table} SET payload = jsonb_build_object('tag', 'huge', "
        "'blob', repeat('z', 30000000)) WHERE id = $1",
        (huge,),
    )
    worker = fleet.start()
    fleet.wait_final(fleet.committed, 60)
    runs = fleet.observer.rows(
        f"SELECT job_id, tag FROM {fleet.runs_table} WHERE job_id = ANY($1) ORDER BY job_id",
        ([escaped, big, huge],),
    )
    assert dict(runs) == {escaped: lookalike, big: "", huge: "huge"}
    assert worker.alive()
    fleet.stop_all()
    fleet.check_invariants()
    fleet.check_no_leaks()
    fleet.check_logs()
