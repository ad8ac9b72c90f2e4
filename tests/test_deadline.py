"""core.deadline: the deadline carried with the work, the earliest of those set around it."""
from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from core.deadline import current, earliest, within

DEADLINES = st.lists(st.none() | st.floats(min_value=0, max_value=1e9), max_size=6)


@given(DEADLINES)
def test_nested_deadlines_hold_the_earliest_and_each_block_restores_the_one_around_it(deadlines):
    def nest(rest: list, around: float | None) -> None:
        assert current() == around
        if not rest:
            return
        with within(rest[0]):
            assert current() == earliest(around, rest[0])
            nest(rest[1:], current())
        assert current() == around

    nest(deadlines, None)


def test_a_deadline_is_the_thread_s_own():
    seen = []
    with within(5.0):
        thread = threading.Thread(target=lambda: seen.append(current()))
        thread.start()
        thread.join()
        assert current() == 5.0
    assert seen == [None]
