"""Leadership under faults: a killed or stalled leader, ten processes racing for the lock."""

from __future__ import annotations

import signal
import time

from tests.faults.harness import (
    LEADER_INTERVAL,
    RESCUE_AFTER,
    Fleet,
    Worker,
    deadline_loop,
    note_time,
    wait_for,
)

# A dead leader's session ends with it; the others try every leader_interval.
FAILOVER_BOUND = 3 * LEADER_INTERVAL + 2.0
# A stalled leader keeps its session until the server ends it for idling (rescue_after here).
STALL_FAILOVER_BOUND = RESCUE_AFTER + 3 * LEADER_INTERVAL + 2.0


class LeaderWatch:
    """Samples who holds the leader lock; fails the moment two sessions do."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        key = fleet.settings.advisory_key("leader")
        self.halves = ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)
        self.samples = 0

    def holders(self) -> list[int]:
        rows = self.fleet.observer.rows(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid::bigint = $1 AND objid::bigint = $2",
            self.halves,
        )
        flagged = self.fleet.observer.value(
            f'SELECT count(*) FROM "{self.fleet.schema}".pgqueue_instances WHERE is_leader'
        )
        self.samples += 1
        assert len(rows) <= 1, f"two sessions hold the leader lock: {rows}"
        assert flagged <= 1, f"{flagged} instances flagged as leader"
        return [pid for (pid,) in rows]

    def leader(self, workers: list[Worker], timeout: float = 20) -> Worker:
        """The worker whose session holds the lock (waiting for one)."""
        for _ in deadline_loop(timeout, "a leader"):
            holders = self.holders()
            if holders:
                for worker in workers:
                    if worker.alive() and holders[0] in self.fleet.backends(worker):
                        return worker
        raise AssertionError("unreachable")  # pragma: no cover

    def watch(self, seconds: float) -> None:
        """Keep sampling for ``seconds``."""
        end = time.monotonic() + seconds
        for _ in deadline_loop(seconds + 5, "sampling"):
            self.holders()
            if time.monotonic() > end:
                return

    def new_leader(self, old: int, timeout: float) -> float:
        """Wait until a session other than ``old`` holds the lock; return the seconds taken."""
        start = time.monotonic()
        for _ in deadline_loop(timeout, "a new leader"):
            holders = self.holders()
            if holders and holders[0] != old:
                return time.monotonic() - start
        raise AssertionError("unreachable")  # pragma: no cover


def test_leader_killed(fleet: Fleet) -> None:
    workers = [fleet.start() for _ in range(3)]
    fleet.wait_ready(*workers)
    watch = LeaderWatch(fleet)
    leader = watch.leader(workers)
    ids = fleet.add(30, sleep=0.2)
    wait_for(lambda: fleet.runs(ids[0]), 10, "jobs running")
    old = watch.holders()[0]
    fleet.signal(leader, signal.SIGKILL)
    took = watch.new_leader(old, FAILOVER_BOUND + 5)
    note_time("leader SIGKILLed: another holds the leader lock", fleet.mode, took, FAILOVER_BOUND)
    # the new leader rescues what the old one was running
    fleet.wait_final(ids, RESCUE_AFTER + 30)
    watch.watch(1.0)
    fleet.stop_all()
    fleet.check_invariants()
    fleet.check_no_leaks()
    fleet.check_logs()


def test_ten_processes_race_for_leadership(fleet: Fleet) -> None:
    workers = [fleet.start(queues="default=2") for _ in range(10)]
    watch = LeaderWatch(fleet)
    # sampled from the first start on: never two holders, whatever the order of arrival
    leader = watch.leader(workers, timeout=60)
    fleet.wait_ready(*workers, timeout=60)
    ids = fleet.add(50, sleep=0.05)
    watch.watch(2.0)
    # kill the leader twice: each time exactly one successor
    for _ in range(2):
        old = watch.holders()[0]
        fleet.signal(leader, signal.SIGKILL)
        took = watch.new_leader(old, FAILOVER_BOUND + 5)
        note_time("10 racing, leader SIGKILLed: one successor", fleet.mode, took, FAILOVER_BOUND)
        leader = watch.leader(workers)
    # a stalled leader loses the lock when the server ends its idle session
    old = watch.holders()[0]
    fleet.signal(leader, signal.SIGSTOP)
    took = watch.new_leader(old, STALL_FAILOVER_BOUND + 5)
    note_time("10 racing, leader SIGSTOPped: one successor", fleet.mode, took, STALL_FAILOVER_BOUND)
    stalled = leader
    leader = watch.leader([w for w in workers if w is not stalled])
    stalled.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: "lost the leader lock" in stalled.log(), 20, "the old leader stood down")
    watch.watch(2.0)
    assert watch.leader(workers) is leader
    fleet.wait_final(ids, 60)
    fleet.stop_all()
    fleet.check_invariants()
    fleet.check_no_leaks()
