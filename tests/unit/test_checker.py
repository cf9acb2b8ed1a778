"""The Jepsen-style checker of the cluster tests: each guarantee it checks is broken once on
purpose, and it must name exactly that violation."""

from __future__ import annotations

from ferromq.testing.checker import Attempt, Copy, Delivery, Outcome, check

G = "broker-a"


def ok(msg_id: str, at: float, offset: int, queue: int = 0) -> Attempt:
    return Attempt(msg_id, at, at + 0.01, Outcome.OK, G, queue, offset)


def held(msg_id: str, offset: int, queue: int = 0) -> Copy:
    return Copy(msg_id, G, queue, offset)


def delivered(msg_id: str, offset: int, at: float, queue: int = 0) -> Delivery:
    return Delivery(msg_id, G, queue, offset, at)


def test_a_clean_run_holds_every_guarantee() -> None:
    attempts = [ok("m0", 1.0, 0), ok("m1", 2.0, 1), ok("m2", 5.0, 2)]
    copies = [held("m0", 0), held("m1", 1), held("m2", 2)]
    report = check(attempts, copies, [delivered("m0", 0, 3), delivered("m1", 1, 4), delivered("m2", 2, 6)])
    assert report.violations == {}
    assert (report.acknowledged, report.gave_up, report.duplicated) == (3, 0, 0)
    assert round(report.longest_gap, 2) == 3.0


def test_lost_and_moved() -> None:
    report = check([ok("m0", 1, 0), ok("m1", 2, 1)], [held("m1", 5)])
    assert report.lost == ["m0"]
    assert report.moved == ["m1"]


def test_conflicting_and_back_going_offsets() -> None:
    attempts = [ok("m0", 1, 4), ok("m1", 2, 4), ok("m2", 3, 3)]
    report = check(attempts, [held("m0", 4), held("m1", 4), held("m2", 3)])
    assert report.conflicts == [("m0", "m1")]
    assert report.offsets_back == ["m1", "m2"]


def test_a_duplicate_is_explained_only_by_an_attempt_that_may_have_stored() -> None:
    # m0: the first answer timed out (it had been stored), the retry was acknowledged.
    # m1: the first attempt was refused, yet two copies are held.
    # m2: stored but not replicated twice, never acknowledged: two copies are allowed.
    attempts = [
        Attempt("m0", 1, 4, Outcome.UNKNOWN),
        ok("m0", 4, 1),
        Attempt("m1", 5, 5.1, Outcome.REFUSED),
        ok("m1", 5.2, 3),
        Attempt("m2", 6, 6.1, Outcome.STORED, G, 0, 4),
        Attempt("m2", 6.2, 6.3, Outcome.STORED, G, 0, 5),
    ]
    copies = [held("m0", 0), held("m0", 1), held("m1", 2), held("m1", 3), held("m2", 4), held("m2", 5)]
    report = check(attempts, copies)
    assert report.duplicated == 2
    assert report.unexplained_duplicates == ["m1"]
    assert report.stored_unacknowledged == 1
    assert report.gave_up == 1
    assert round(report.stall_max, 2) == 3.01


def test_deliveries_missing_out_of_order_and_redelivered() -> None:
    attempts = [ok("m0", 1, 0), ok("m1", 2, 1), ok("m2", 3, 2)]
    copies = [held("m0", 0), held("m1", 1), held("m2", 2)]
    # m1 first delivered after m2 (a skip, then back): out of order; m0 again: a redelivery.
    deliveries = [delivered("m0", 0, 4), delivered("m2", 2, 5), delivered("m1", 1, 6), delivered("m0", 0, 7)]
    report = check(attempts, copies, deliveries)
    assert report.out_of_order == ["m1"]
    assert report.redelivered == 1
    assert report.not_delivered == []
    report = check(attempts, copies, deliveries[:2])
    assert report.not_delivered == ["m1"]
    assert set(report.violations) == {"not delivered"}
