#!/usr/bin/env python3
"""The JAX-suite figure of issue 10: of the tests that pass on cpu and that JAX's own
decorators or device checks do not skip on a non-cpu platform, the share that passes on wgpu.

    python3 scripts/jax_suite_figure.py CPU_OUT WGPU_OUT [--list]

CPU_OUT and WGPU_OUT are output directories of `../shared/tools/jax-suite/run_suite.sh`
(`outcomes/*.tsv` per-test outcomes, `junit/*.xml` for skip messages), run with the same
NUM_CASES. Per file it prints: tests that passed on cpu; of those on wgpu: passed, skipped by
JAX itself (excluded from the figure), not passed (failed, error, crash, missing, or skipped for
any other reason: conservatively counted against us), and the percentage. `--list` also prints
each test that counts against us with its outcome. Only files present in both runs count.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

# Skip messages that JAX's test utilities or tests produce from the platform alone.
JAX_SKIPS = [
    r"Skipped unless running on devices with tags",  # jtu.run_on_devices
    r"Skipped on devices with tags",  # jtu.skip_on_devices
    r"not supported when FLAGS\.jax_skip_slow_tests",  # jtu.skip_on_flag (slow tests)
    r"^Only for ",  # "Only for CPU", "Only for CPU and TPU", ...
    r"[Oo]nly (runs|works|supported|implemented) on",
    r"requires (cpu|gpu|tpu|cuda|rocm)",
    r"Test requires .*(cpu|gpu|tpu|cuda|rocm|CPU|GPU|TPU|CUDA|ROCm)",
    r"^Unimplemented case$",  # JAX's own marker for cases it leaves out on some platforms
]
JAX_SKIP_RE = re.compile("|".join(f"(?:{p})" for p in JAX_SKIPS))


def outcomes(out: str) -> dict[str, dict[str, str]]:
    """file -> test id -> outcome, from `outcomes/*.tsv`."""
    r: dict[str, dict[str, str]] = {}
    for p in glob.glob(os.path.join(out, "outcomes", "*.tsv")):
        with open(p) as f:
            r[os.path.basename(p)[:-4]] = dict(
                line.rstrip("\n").rsplit("\t", 1) for line in f if line.strip()
            )
    return r


def skip_messages(out: str, file: str) -> dict[str, str]:
    """Test name (`Class::method`) -> skip message, from `junit/<file>.xml`."""
    path = os.path.join(out, "junit", f"{file}.xml")
    msgs: dict[str, str] = {}
    if not os.path.exists(path):
        return msgs
    for tc in ET.parse(path).iter("testcase"):
        s = tc.find("skipped")
        if s is not None:
            cls = (tc.get("classname") or "").rsplit(".", 1)[-1]
            msgs[f"{cls}::{tc.get('name')}"] = s.get("message") or ""
    return msgs


def short(test_id: str) -> str:
    """`tests/x.py::Class::method` -> `Class::method`."""
    parts = test_id.split("::")
    return "::".join(parts[-2:])


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cpu, gpu = outcomes(argv[1]), outcomes(argv[2])
    listing = "--list" in argv
    print(f"{'file':32} {'cpu_pass':>8} {'pass':>6} {'jax_skip':>8} {'not_pass':>8} {'pct':>6}")
    tot = collections.Counter()
    against: list[tuple[str, str, str]] = []
    reasons = collections.Counter()
    for file in sorted(set(cpu) & set(gpu)):
        msgs = skip_messages(argv[2], file)
        c = collections.Counter()
        for t, o in cpu[file].items():
            if o != "passed":
                continue
            c["cpu"] += 1
            got = gpu[file].get(t, "missing")
            if got == "passed":
                c["pass"] += 1
            elif got == "skipped" and JAX_SKIP_RE.search(msgs.get(short(t), "")):
                c["jax_skip"] += 1
            else:
                c["not"] += 1
                why = got
                if got == "skipped":
                    why = f"skipped: {msgs.get(short(t), '?')[:100]}"
                    reasons[why] += 1
                against.append((file, t, why))
        denom = c["cpu"] - c["jax_skip"]
        pct = 100.0 * c["pass"] / max(denom, 1)
        print(f"{file:32} {c['cpu']:8d} {c['pass']:6d} {c['jax_skip']:8d} {c['not']:8d} {pct:6.1f}")
        tot.update(c)
    denom = tot["cpu"] - tot["jax_skip"]
    pct = 100.0 * tot["pass"] / max(denom, 1)
    print(f"{'TOTAL':32} {tot['cpu']:8d} {tot['pass']:6d} {tot['jax_skip']:8d} {tot['not']:8d} {pct:6.1f}")
    if reasons:
        print("\nskips counted against wgpu (not JAX's platform skips):")
        for why, n in reasons.most_common():
            print(f"  {n:4d}  {why}")
    if listing:
        print("\nnot passing on wgpu:")
        for file, t, why in against:
            print(f"  {file}  {short(t)}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
