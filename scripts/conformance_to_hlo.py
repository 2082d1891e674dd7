#!/usr/bin/env python3
"""Converts StableHLO conformance programs to serialized HloModuleProto files with jaxlib's own
converter, so the HLO proto frontend can be checked against the same programs as the text one.

usage: conformance_to_hlo.py OUT_DIR INPUT... [--every N]

Each INPUT is a .mlir file or a directory of them. A file with several modules (separated by
`// -----`) gives one `NAME.K.hlo.pb` per module; a file with one module gives `NAME.hlo.pb`.
`--every N` converts every N-th file only (sorted by name). Programs jaxlib cannot convert (the
`check` dialect ops of the interpreter tests, for instance) are listed on stderr and skipped.
Prints one summary line: `converted C of M modules (F files), skipped S`.
"""

import os
import sys


def modules_of(text):
    chunks = [c for c in text.split("\n// -----") if "module" in c or "func.func" in c]
    return chunks or [text]


def main(argv):
    every = 1
    args = []
    it = iter(argv)
    for a in it:
        if a == "--every":
            every = int(next(it))
        else:
            args.append(a)
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    from jax._src.lib import _jax  # noqa: import late so --help works without jax

    out_dir, inputs = args[0], args[1:]
    os.makedirs(out_dir, exist_ok=True)
    files = []
    for p in inputs:
        if os.path.isdir(p):
            files += sorted(
                os.path.join(p, f) for f in os.listdir(p) if f.endswith(".mlir")
            )
        else:
            files.append(p)
    files = files[::every]
    converted = skipped = total = 0
    for path in files:
        stem = os.path.basename(path)[: -len(".mlir")]
        with open(path) as f:
            mods = modules_of(f.read())
        for k, text in enumerate(mods):
            total += 1
            name = f"{stem}.hlo.pb" if len(mods) == 1 else f"{stem}.{k}.hlo.pb"
            try:
                comp = _jax.mlir.mlir_module_to_xla_computation(
                    text, use_tuple_args=False, return_tuple=False
                )
                data = comp.as_serialized_hlo_module_proto()
            except Exception as e:  # jaxlib raises its own error types
                skipped += 1
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                print(f"skip {path} module {k}: {first[:200]}", file=sys.stderr)
                continue
            with open(os.path.join(out_dir, name), "wb") as f:
                f.write(data)
            converted += 1
    print(f"converted {converted} of {total} modules ({len(files)} files), skipped {skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
