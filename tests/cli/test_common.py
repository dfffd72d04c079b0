"""Helpers shared by the commands: the caps line of the text report."""

from __future__ import annotations

from psdsf_dist.cli.common import cap_line
from psdsf_dist.protocol.convergence import Observation


def capped(round_: int, excess: float) -> Observation:
    return Observation(round_, float(round_), 1.0, False, True, 1.0, 0.0, 0.0, 0.0, 0.0, 1,
                       cap_excess=excess)


def test_the_caps_line_says_none_was_exceeded_or_by_how_much_and_when() -> None:
    assert cap_line([capped(0, 0.0)]) == "caps: no user's total exceeded its max_tasks"
    line = cap_line([capped(0, 0.0), capped(3, 0.25), capped(4, 0.1)])
    assert "by up to 25.00% (round 3" in line
