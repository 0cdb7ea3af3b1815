"""Write schemas/standalone/: each current schema with every named type it uses defined inline.

A client in another language reads a turnlog record with one file, as any Avro library parses
it on its own; the files in schemas/ refer to types in other files (TurnResumed to Message,
Message to ToolCall and Role). tests/unit/test_standalone_schemas.py fails when a file here is
not its schema's expansion: run this after changing a schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from turnlog.wire.codec import schema_for, schema_names  # noqa: E402


def render(name: str) -> str:
    return json.dumps(schema_for(name), indent=2) + "\n"


def main() -> None:
    out = ROOT / "schemas" / "standalone"
    out.mkdir(exist_ok=True)
    for name in schema_names():
        (out / f"{name}.avsc").write_text(render(name), encoding="utf-8")
        print(f"schemas/standalone/{name}.avsc")


if __name__ == "__main__":
    main()
