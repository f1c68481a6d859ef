"""The node daemon's queue (daemon/admission.py) as pure logic: one call per sandbox at
a time, sandboxes taking turns, the bounds on waiting calls, and how long the pool has
been saturated, on a settable clock. The daemon serving real shims with it is
tests/e2e/test_attack_thick.py."""
from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.daemon.admission import MAX_WAITING_PER_SANDBOX, CallQueue, Refused


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def take(q: CallQueue) -> tuple:
    taken = q.get()
    assert taken is not None
    return taken


def test_a_sandbox_runs_one_call_at_a_time_and_its_others_hold_no_worker():
    q: CallQueue[str] = CallQueue(workers=2, max_waiting=10)
    for call in ("a-ADD", "a-DEL", "a-DEL again"):
        q.put("a", call)
    q.put("b", "b-ADD")
    a, call = take(q)
    assert call == "a-ADD"
    b, call = take(q)
    assert call == "b-ADD"  # not a's second call: it waits for a-ADD, without a worker
    assert (q.running(), q.waiting()) == (2, 2)
    q.done(b)
    q.put("c", "c-ADD")
    assert take(q)[1] == "c-ADD"  # the free worker serves another sandbox
    q.done(a)
    assert take(q)[1] == "a-DEL"


def test_sandboxes_take_turns():
    """A sandbox whose call ended goes behind the sandboxes that came meanwhile."""
    q: CallQueue[str] = CallQueue(workers=1, max_waiting=10)
    q.put("a", "a1")
    q.put("a", "a2")
    a, _ = take(q)
    q.put("b", "b1")
    q.put("c", "c1")
    q.done(a)
    order = []
    for _ in range(3):
        slot, call = take(q)
        order.append(call)
        q.done(slot)
    assert order == ["b1", "c1", "a2"]


def test_calls_of_no_sandbox_run_side_by_side():
    q: CallQueue[str] = CallQueue(workers=3, max_waiting=10)
    for call in ("GC", "STATUS", "STATUS"):
        q.put(None, call)
    assert sorted(take(q)[1] for _ in range(3)) == ["GC", "STATUS", "STATUS"]


def test_the_waiting_calls_of_a_sandbox_are_bounded():
    q: CallQueue[str] = CallQueue(workers=1, max_waiting=100)
    q.put("a", "running")
    take(q)
    for i in range(MAX_WAITING_PER_SANDBOX):
        q.put("a", f"waits {i}")
    with pytest.raises(Refused) as e:
        q.put("a", "one more")
    assert e.value.bound == "sandbox"
    assert str(e.value) == (f"{MAX_WAITING_PER_SANDBOX} calls of this sandbox already wait "
                            f"for the one running (at most {MAX_WAITING_PER_SANDBOX})")
    q.put("b", "another sandbox still gets in")
    assert q.waiting() == MAX_WAITING_PER_SANDBOX + 1


def test_the_waiting_calls_are_bounded_in_all():
    q: CallQueue[str] = CallQueue(workers=2, max_waiting=3)
    for sandbox in "abc":
        q.put(sandbox, sandbox)
    with pytest.raises(Refused) as e:
        q.put("d", "d")
    assert e.value.bound == "queue"
    assert str(e.value) == "3 calls already wait for the daemon's 2 workers (at most 3)"
    slot, _ = take(q)
    q.put("d", "d")  # one left the queue: room again


def test_saturated_while_every_worker_is_busy_and_a_runnable_call_waits():
    clock = Clock()
    q: CallQueue[str] = CallQueue(workers=2, max_waiting=10, clock=clock)
    q.put("a", "a1")
    q.put("b", "b1")
    assert q.saturated_for() == 0.0  # waiting, but workers are free
    a, _ = take(q)
    b, _ = take(q)
    q.put("a", "a2")  # waits for its own sandbox, not for a worker
    clock.now += 50
    assert q.saturated_for() == 0.0
    q.put("c", "c1")  # could run: waits for a worker
    clock.now += 7
    assert q.saturated_for() == 7.0
    q.put("d", "d1")
    clock.now += 3
    assert q.saturated_for() == 10.0  # since the first call began to wait for a worker
    q.done(b)  # a worker is free: not saturated, whatever still waits
    assert q.saturated_for() == 0.0
    c, _ = take(q)  # busy again with d1 waiting: saturated from now
    clock.now += 2
    assert q.saturated_for() == 2.0
    q.done(a)
    q.done(c)
    for _ in range(2):
        take(q)
    assert q.waiting() == 0 and q.saturated_for() == 0.0


def test_close_lets_the_workers_finish_what_waits_then_end():
    q: CallQueue[str] = CallQueue(workers=2, max_waiting=10)
    for call in ("a1", "a2", "b1", "c1"):
        q.put(call[0], call)
    served: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        while (taken := q.get()) is not None:
            with lock:
                served.append(taken[1])
            q.done(taken[0])

    q.close()
    with pytest.raises(ValueError):
        q.put("d", "d1")
    workers = [threading.Thread(target=work) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)  # a hang guard: each ends once nothing waits
        assert not w.is_alive()
    assert sorted(served) == ["a1", "a2", "b1", "c1"]
    assert served.index("a1") < served.index("a2")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "start", "end"]),
                          st.sampled_from(["a", "b", "c", None])), max_size=60),
       st.integers(1, 3), st.integers(0, 6))
def test_any_interleaving_keeps_the_rules(ops, workers, max_waiting):
    """Whatever the order of arrivals, starts and ends: never two calls of one sandbox
    at once, never more running than workers, each sandbox's calls in arrival order,
    a refusal only past a bound, and every admitted call run once."""
    q: CallQueue[tuple] = CallQueue(workers, max_waiting, max_waiting_per_sandbox=2)
    running: list = []
    admitted: list = []
    started: list = []
    for n, (op, sandbox) in enumerate(ops):
        if op == "put":
            waiting_of_mine = sum(1 for c in admitted if c not in started and c[0] == sandbox)
            waiting = q.waiting()
            try:
                q.put(sandbox, (sandbox, n))
                admitted.append((sandbox, n))
            except Refused as e:
                assert (e.bound == "queue" and waiting >= max_waiting) or (
                    e.bound == "sandbox" and sandbox is not None and waiting_of_mine >= 2)
        elif op == "start" and len(running) < workers:
            taken = q.get(timeout=0)  # a free worker takes what is ready, if anything
            if taken is not None:
                running.append(taken)
                started.append(taken[1])
        elif op == "end" and running:
            q.done(running.pop(0)[0])
        busy = [c[0] for _, c in running if c[0] is not None]
        assert len(busy) == len(set(busy)) and len(running) <= workers
        if len(running) < workers:
            assert q.saturated_for() == 0.0
    for slot, _ in running:
        q.done(slot)
    q.close()
    while (taken := q.get(timeout=0)) is not None:
        started.append(taken[1])
        q.done(taken[0])
    assert sorted(started, key=repr) == sorted(admitted, key=repr)
    for sandbox in "abc":
        mine = [c for c in started if c[0] == sandbox]
        assert mine == sorted(mine, key=lambda c: c[1])
