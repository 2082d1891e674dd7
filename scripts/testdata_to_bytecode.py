"""Serializes StableHLO text files into portable artifacts with the installed jaxlib.

    python scripts/testdata_to_bytecode.py SRC_DIR OUT_DIR [TARGET_VERSION]

Each SRC_DIR/NAME.mlir becomes OUT_DIR/NAME.mlirbc (target: jaxlib's current version unless
given). Files jaxlib cannot serialize are listed on stderr. Then compare
`wgpu-hlo conformance SRC_DIR` with `wgpu-hlo conformance OUT_DIR`.
"""

from __future__ import annotations

import pathlib
import sys

from jaxlib.mlir.dialects import stablehlo


def main():
    src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    version = sys.argv[3] if len(sys.argv) > 3 else stablehlo.get_current_version()
    out.mkdir(parents=True, exist_ok=True)
    ok = failed = 0
    for f in sorted(src.glob("*.mlir")):
        try:
            data = stablehlo.serialize_portable_artifact_str(f.read_text(), version)
        except Exception as e:  # noqa: BLE001
            print(f"skip {f.name}: {str(e).splitlines()[0][:120]}", file=sys.stderr)
            failed += 1
            continue
        (out / (f.stem + ".mlirbc")).write_bytes(data)
        ok += 1
    print(f"{ok} artifacts at {version}, {failed} files not serializable")


if __name__ == "__main__":
    main()
