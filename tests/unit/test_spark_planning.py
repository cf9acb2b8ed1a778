"""Planning a read's tasks: small ranges packed together, large reads spread over the cores."""

from __future__ import annotations

from ferromq.spark.planning import MIN_TASK_ROWS, PACK_ROWS, QueueRange, ReadTask, plan


def offsets(tasks: list[ReadTask]) -> list[tuple[int, int]]:
    """Every planned (queue, offset), in plan order."""
    return [(r.queue_id, o) for t in tasks for r in t.ranges for o in range(r.start, r.end)]


def queues(n: int, size: int) -> list[QueueRange]:
    return [QueueRange("T", q, 1000, 1000 + size) for q in range(n)]


def test_small_reads_are_one_task_and_empty_ranges_are_left_out() -> None:
    ranges = queues(8, 1000)
    tasks = plan(ranges, None, lambda r: 0 if r.queue_id == 5 else 100, cores=2)
    assert len(tasks) == 1
    assert offsets(tasks) == [(q, o) for q in range(8) if q != 5 for o in range(1000, 2000)]


def test_a_large_selective_read_is_spread_over_the_cores() -> None:
    # One tag of ten over eight queues: 8 x 6,250 expected rows would pack into one task. Each
    # task takes a slice of every queue (one stretch of store time, so of the CommitLog).
    ranges = queues(8, 62_500)
    tasks = plan(ranges, None, lambda r: (r.end - r.start) // 10, cores=2)
    assert [[(r.queue_id, r.start, r.end) for r in t.ranges] for t in tasks] == [
        [(q, 1000, 32_250) for q in range(8)],
        [(q, 32_250, 63_500) for q in range(8)],
    ]
    assert sorted(offsets(tasks)) == offsets([ReadTask(tuple(ranges))])  # every offset once
    # One queue: its range is cut in two.
    tasks = plan(queues(1, 62_464), None, lambda r: r.end - r.start, cores=2)
    assert [(r.start, r.end) for t in tasks for r in t.ranges] == [(1000, 32_232), (32_232, 63_464)]
    # A range too short to cut into as many slices gives the tasks what it has.
    short = [QueueRange("T", 0, 0, 1), QueueRange("T", 1, 0, 2 * MIN_TASK_ROWS)]
    tasks = plan(short, None, lambda r: r.end - r.start, cores=2)
    assert [[(r.queue_id, r.start, r.end) for r in t.ranges] for t in tasks] == [
        [(1, 0, MIN_TASK_ROWS)],
        [(0, 0, 1), (1, MIN_TASK_ROWS, 2 * MIN_TASK_ROWS)],
    ]


def test_spreading_needs_enough_rows_a_core_and_keeps_larger_plans() -> None:
    below = plan(queues(1, 2 * MIN_TASK_ROWS - 1), None, lambda r: r.end - r.start, cores=2)
    assert len(below) == 1
    full_scan = plan(queues(8, 2 * PACK_ROWS), None, lambda r: r.end - r.start, cores=2)
    assert len(full_scan) == 8  # already more tasks than cores: one per queue, as before
    four = plan(queues(2, 4 * MIN_TASK_ROWS), None, lambda r: r.end - r.start, cores=4)
    assert len(four) == 4
    assert sorted(offsets(four)) == offsets([ReadTask(tuple(queues(2, 4 * MIN_TASK_ROWS)))])


def test_max_records_per_partition_plans_one_task_a_piece() -> None:
    tasks = plan(queues(2, 100), 40, lambda r: r.end - r.start, cores=2)
    assert [(t.ranges[0].queue_id, t.ranges[0].start, t.ranges[0].end) for t in tasks] == [
        (0, 1000, 1040),
        (0, 1040, 1080),
        (0, 1080, 1100),
        (1, 1000, 1040),
        (1, 1040, 1080),
        (1, 1080, 1100),
    ]
