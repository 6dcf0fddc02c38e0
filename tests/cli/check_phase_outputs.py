# SPDX-License-Identifier: Apache-2.0
"""Checks the outputs of a `fieldfuse phase` run with the standard library only.

  check_phase_outputs.py REPORT [--min-correlation C] [--min-gain G] [--expect KEY.PATH=VALUE ...]
                                [--at-most KEY.PATH=V ...] [--at-least KEY.PATH=V ...]
                                [--npy PATH D0,D1 ...]

The report must be JSON; with --min-correlation its recovery numbers must be finite and the phase
correlation at least C; --min-gain: the correlation must beat the one without optimisation by G;
--expect compares a dotted path of the report with a JSON value, --at-most / --at-least bound a
number there; --npy checks that a float32 .npy file has the given shape and finite values."""
import argparse
import ast
import json
import math
import struct


def npy_shape_and_values(path):
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY", f"{path}: not a .npy file"
    (length,) = struct.unpack("<H", data[8:10])
    header = ast.literal_eval(data[10 : 10 + length].decode("latin1"))
    assert header["descr"] == "<f4" and not header["fortran_order"], header
    shape = tuple(header["shape"])
    count = math.prod(shape)
    values = struct.unpack("<%df" % count, data[10 + length :])
    return shape, values


def at(report, path):
    node = report
    for key in path.split("."):
        node = node[key]
    return node


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--min-correlation", type=float)
    parser.add_argument("--min-gain", type=float)
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--at-most", action="append", default=[])
    parser.add_argument("--at-least", action="append", default=[])
    parser.add_argument("--npy", nargs=2, action="append", default=[])
    args = parser.parse_args()
    report = json.load(open(args.report, encoding="utf-8"))
    if args.min_correlation is not None:
        recovery = report["recovery"]
        for key, value in recovery.items():
            assert isinstance(value, (int, float)) and math.isfinite(value), (key, value)
        got = recovery["phase_correlation"]
        assert got >= args.min_correlation, f"phase correlation {got} < {args.min_correlation}"
        print(f"recovery: {recovery}")
    if args.min_gain is not None:
        recovery = report["recovery"]
        gain = recovery["phase_correlation"] - recovery["phase_correlation_at_start"]
        assert gain >= args.min_gain, f"optimising gained {gain} correlation < {args.min_gain}"
    for expectation in args.expect:
        path, expected = expectation.split("=", 1)
        node = at(report, path)
        assert node == json.loads(expected), f"{path} is {node!r}, expected {expected}"
    for bound in args.at_most:
        path, limit = bound.split("=", 1)
        assert at(report, path) <= float(limit), f"{path} is {at(report, path)} > {limit}"
    for bound in args.at_least:
        path, limit = bound.split("=", 1)
        assert at(report, path) >= float(limit), f"{path} is {at(report, path)} < {limit}"
    for path, shape_text in args.npy:
        shape, values = npy_shape_and_values(path)
        expected = tuple(int(n) for n in shape_text.split(","))
        assert shape == expected, f"{path}: shape {shape}, expected {expected}"
        assert all(math.isfinite(v) for v in values), f"{path}: non-finite values"
    print(f"{args.report}: checks passed")


if __name__ == "__main__":
    main()
