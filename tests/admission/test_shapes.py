"""Task shapes: Ray options to demand vectors, and every refusal one clear line."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from psdsf_dist.admission.shapes import (
    DEFAULT_MAX_RETRIES,
    GIB,
    OwnOptions,
    ShapeError,
    check_fits_somewhere,
    check_options,
    check_user,
    check_weight,
    task_shape,
)

RESOURCES = ("CPU", "memory", "GPU", "fpga")


def test_ray_defaults_and_units() -> None:
    assert task_shape({}).as_dict() == {"CPU": 1.0}  # Ray's default task: one CPU
    s = task_shape({"num_cpus": 2, "memory": 3 * GIB, "num_gpus": 0.5,
                    "resources": {"fpga": 1}})
    assert s.as_dict() == {"CPU": 2.0, "GPU": 0.5, "fpga": 1.0, "memory": 3.0}
    assert s.demand(RESOURCES).tolist() == [2.0, 3.0, 0.5, 1.0]
    assert s.ray_options() == {"num_cpus": 2.0, "num_gpus": 0.5, "memory": 3 * 2**30,
                               "resources": {"fpga": 1.0}}
    assert task_shape({"num_cpus": 0, "resources": {"fpga": 1}}).ray_options() == {
        "num_cpus": 0.0, "num_gpus": 0.0, "resources": {"fpga": 1.0}}


def test_equal_shapes_compare_equal() -> None:
    assert task_shape({"num_cpus": 1, "memory": GIB}) == task_shape({"memory": GIB})


BAD: list[tuple[dict[str, Any], str]] = [
    ({"num_cpus": -1}, "num_cpus: expected a finite number >= 0"),
    ({"num_cpus": "2"}, "num_cpus: expected a number"),
    ({"num_cpus": True}, "num_cpus: expected a number"),
    ({"memory": float("inf")}, "memory: expected a finite number"),
    ({"num_cpus": 0}, "a task asking for no resource"),
    ({"resources": ["fpga"]}, "resources: expected a mapping"),
    ({"resources": {"CPU": 1}}, "resources.CPU: use num_cpus"),
    ({"resources": {"fpga": -2}}, "resources.fpga: expected a finite number >= 0"),
]


@pytest.mark.parametrize(("options", "message"), BAD)
def test_bad_shapes_are_one_line(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ShapeError) as err:
        task_shape(options)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_options_the_allocator_does_not_take() -> None:
    own = check_options({"num_cpus": 1, "name": "f", "max_retries": 2, "runtime_env": {}})
    assert own == OwnOptions(max_retries=2, num_returns=1, preemptible=False)
    assert check_options({"num_returns": 3, "preemptible": True}) == OwnOptions(
        max_retries=DEFAULT_MAX_RETRIES, num_returns=3, preemptible=True)
    with pytest.raises(ShapeError, match="scheduling_strategy: not an option"):
        check_options({"scheduling_strategy": "SPREAD"})
    with pytest.raises(ShapeError, match="max_retries: expected an integer >= 0"):
        check_options({"max_retries": -1})
    check_options({"preemptible": True})
    with pytest.raises(ShapeError, match="preemptible: expected True or False, got 'yes'"):
        check_options({"preemptible": "yes"})


def test_unshared_resource_and_no_room_anywhere() -> None:
    with pytest.raises(ShapeError, match="resources: TPU not shared by the allocator"):
        task_shape({"resources": {"TPU": 1}}).demand(("CPU", "memory"))
    cap = np.array([[4.0, 16.0], [8.0, 4.0]])
    check_fits_somewhere(task_shape({"num_cpus": 8}), ("CPU", "memory"), cap, ["a", "b"])
    with pytest.raises(ShapeError) as err:
        check_fits_somewhere(task_shape({"num_cpus": 8, "memory": 8 * GIB}),
                             ("CPU", "memory"), cap, ["a", "b"])
    assert str(err.value) == ("shape {CPU: 8, memory: 8}: no node of the 2 can hold one task "
                              "(largest: CPU 8, memory 16)")


@pytest.mark.parametrize("weight", [float("inf"), float("nan"), 0, -1, True, "2"])
def test_a_weight_is_finite_and_positive(weight: Any) -> None:
    with pytest.raises(ShapeError, match=r"^weight: expected a finite number > 0, got .*$"):
        check_weight(weight)


def test_weights_and_names_that_pass() -> None:
    assert check_weight(None) is None and check_weight(2) == 2.0
    assert check_user("alice-2") == "alice-2"


@pytest.mark.parametrize("user", ["", "   ", "a\tb", "bell\x07", None, 3])
def test_a_user_name_is_printable_and_not_blank(user: Any) -> None:
    with pytest.raises(ShapeError, match=r"^user: expected a non-blank name of printable"):
        check_user(user)
