"""``python -m psdsf_dist.policies FILE...``: rewrite the registry table in each markdown file
(between :data:`~psdsf_dist.policies.registry.DOC_BEGIN` and ``DOC_END``) from the registry."""

from __future__ import annotations

import sys
from pathlib import Path

from psdsf_dist.policies.registry import with_registry

for name in sys.argv[1:]:
    path = Path(name)
    path.write_text(with_registry(path.read_text(encoding="utf-8")), encoding="utf-8")
