"""Running tenant tasks marked per node: counted per user, a dead worker's mark dropped."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from psdsf_dist.runtime.running_marks import mark_end, mark_start, marks_dir, running_per_user


def test_marks_count_per_user_and_go_when_the_task_or_its_process_ends() -> None:
    node = f"test-{uuid.uuid4().hex}"
    try:
        a1, a2 = mark_start(node, "alice"), mark_start(node, "alice")
        b = mark_start(node, "bob/ü")  # any printable name
        assert running_per_user(node) == {"alice": 2, "bob/ü": 1}
        mark_end(a1)
        assert running_per_user(node) == {"alice": 1, "bob/ü": 1}
        # a worker that died mid-task leaves its mark: not counted, and removed
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout.strip()
        stale = marks_dir(node) / f"{b'carol'.hex()}.{dead}.0"
        stale.touch()
        assert running_per_user(node) == {"alice": 1, "bob/ü": 1}
        assert not stale.exists()
        mark_end(a2)
        mark_end(b)
        assert running_per_user(node) == {}
        assert running_per_user(f"never-{uuid.uuid4().hex}") == {}
    finally:
        for entry in os.scandir(marks_dir(node)):
            os.unlink(entry.path)
        marks_dir(node).rmdir()
