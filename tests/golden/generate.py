"""Rewrite the golden ``.bin`` files from the values in ``tests/unit/test_codec_golden.py``.

Run by hand, and only for a deliberate wire change: ``python tests/golden/generate.py``. The
golden test never runs this, which is what lets it catch an accidental change.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    source = HERE.parent / "unit" / "test_codec_golden.py"
    spec = importlib.util.spec_from_file_location("golden_values", source)
    if spec is None or spec.loader is None:
        sys.exit(f"cannot load {source}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    from turnlog.wire import codec

    for name, value in module.GOLDEN.items():
        (HERE / f"{name}.bin").write_bytes(codec.encode(value))
        print(f"wrote {name}.bin")
    for name in module.HISTORY:
        (HERE / f"{name}.bin").write_bytes(module.encode_old(name))
        print(f"wrote {name}.bin")


if __name__ == "__main__":
    main()
