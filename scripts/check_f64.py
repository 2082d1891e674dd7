#!/usr/bin/env python3
"""Exact (mpmath) error check of an f64 sweep dump written by the `dump_f64` test:

    WGPU_HLO_MATH_DUMP=exp WGPU_HLO_MATH_DUMP_TO=/tmp/exp.txt \\
        cargo test --test math_accuracy -- --ignored dump_f64
    python3 scripts/check_f64.py exp /tmp/exp.txt

prints the max error in ULP of the correctly rounded result and where it occurs.
"""
import struct
import sys

import mpmath as mp

mp.mp.dps = 60

FUNCS = {
    "exp": mp.exp, "expm1": mp.expm1, "log": mp.log, "log1p": mp.log1p, "sin": mp.sin,
    "cos": mp.cos, "tan": mp.tan, "tanh": mp.tanh, "atan": mp.atan, "asin": mp.asin,
    "acos": mp.acos, "sinh": mp.sinh, "cosh": mp.cosh, "asinh": mp.asinh, "acosh": mp.acosh,
    "atanh": mp.atanh, "erf": mp.erf, "erfc": mp.erfc, "cbrt": mp.cbrt, "sqrt": mp.sqrt,
    "rsqrt": lambda x: 1 / mp.sqrt(x), "logistic": lambda x: 1 / (1 + mp.exp(-x)),
    "pow": mp.power, "atan2": mp.atan2, "erf_inv": mp.erfinv, "lgamma": mp.loggamma,
    "digamma": mp.digamma, "bessel_i1e": lambda x: mp.besseli(1, x) * mp.exp(-abs(x)),
}


def f64(h):
    return struct.unpack("<d", struct.pack("<Q", int(h, 16)))[0]


def main():
    name, path = sys.argv[1], sys.argv[2]
    f = FUNCS[name]
    worst = (0.0, None)
    for line in open(path):
        *args, res = [f64(t) for t in line.split()]
        if any(a != a or a in (float("inf"), float("-inf")) for a in args + [res]):
            continue
        try:
            want = f(*[mp.mpf(a) for a in args])
        except (ValueError, ZeroDivisionError):
            continue
        if not isinstance(want, mp.mpf) or want == 0 or abs(want) > 1.7e308:
            continue
        e = max(int(mp.floor(mp.log(abs(want), 2))), -1022)
        err = float(abs(mp.mpf(res) - want) / mp.mpf(2) ** (e - 52))
        if err > worst[0]:
            worst = (err, args)
    print(f"{name}: max {worst[0]:.3f} ULP at {worst[1]}")


if __name__ == "__main__":
    main()
