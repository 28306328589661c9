# SPDX-License-Identifier: Apache-2.0
"""Prints numpy's reference values for joule::rng (tests/core/rng_test.cpp) as JSON.

Run with a Python that has numpy (Debian: /usr/bin/python3 with python3-numpy):

    /usr/bin/python3 tests/core/rng_reference.py > tests/core/data/rng_reference.json

Conventions: 64-bit words are JSON integers; 128-bit values (PCG64 state and increment) are decimal strings;
doubles are Python's shortest round-trip repr, so parsing them gives the exact double. Long index lists
are stored as an FNV-1a hash of their little-endian int64 bytes (see fnv1a64) plus the state after the draw.
"""

import json
import pathlib
import sys

import numpy as np

SEEDS = [0, 1, 2, 42, 12345, 2**32 + 5, 2**63 + 7]
# Extra seeds for SeedSequence alone: word-count edges (one vs two 32-bit entropy words).
SEED_SEQUENCE_SEEDS = SEEDS + [3, 2**32 - 1, 2**32, 2**64 - 1]
BOUNDED_MAXES = [0, 1, 2, 3, 5, 10, 100, 2**31, 2**32 - 2, 2**32 - 1, 2**40]
BOUNDED_DRAWS = 12
# (n, k): k = 0 and k = n edges, Floyd (n <= 10000 or k <= n // 50) and tail-shuffle (n > 10000 and
# k > n // 50) branches on both sides of the boundary, a large tail shuffle, and populations beyond 2^32
# (64-bit bounded draws).
CHOICES = [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (5, 0), (5, 3), (5, 5), (10, 3), (50, 50), (100, 10),
           (100, 100), (1000, 999), (10000, 1), (10000, 200), (10000, 1000), (10000, 10000), (10001, 200),
           (10001, 201), (20000, 1), (20000, 400), (20000, 401), (20000, 1000), (20000, 20000),
           (2**21, 50000), (2**32 + 10, 5), (2**40, 3)]
CHOICE_FULL_MAX = 1000  # longer results are stored as a hash
PERMUTATIONS = [0, 1, 2, 3, 10, 100]
NORMALS = 2000
NORMAL_PARAMS = [(0.0, 1.0), (5.0, 2.0), (-3.0, 0.5), (1.0, 0.0), (1e10, 1e-3), (0.25, 1.5)]
INTERLEAVED_OPS = "3 3 6 3 d 3 3 3 6 6 3 d d 3 6 3 3 3 3 6 d 3 6 6 6 3 d 3 3 6".split()
MASK52 = (1 << 52) - 1
# Long standard_normal runs, stored as a checksum: they reach the rare ziggurat paths thousands of times.
LONG_NORMAL_SEEDS = [0, 12345]
LONG_NORMALS = 1_000_000


def fnv1a64(values):
    """FNV-1a over the little-endian int64 bytes of `values` (same as the C++ test)."""
    h = 0xCBF29CE484222325
    for v in values:
        for byte in int(v).to_bytes(8, "little", signed=True):
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def weighted_checksum(values):
    """sum of bits(values[i]) * (2i + 1) mod 2^64, over the doubles' IEEE bits (same as the C++ test)."""
    bits = np.asarray(values, dtype=np.float64).view(np.uint64)
    weights = np.arange(len(bits), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(bits * weights, dtype=np.uint64))


def state_dict(bit_generator):
    s = bit_generator.state
    return {"state": str(s["state"]["state"]), "inc": str(s["state"]["inc"]),
            "has_uint32": int(s["has_uint32"]), "uinteger": int(s["uinteger"])}


def set_state(bit_generator, d):
    bit_generator.state = {"bit_generator": "PCG64",
                           "state": {"state": int(d["state"]), "inc": int(d["inc"])},
                           "has_uint32": d["has_uint32"], "uinteger": d["uinteger"]}


def next32(bit_generator):
    return int(bit_generator.ctypes.next_uint32(bit_generator.ctypes.state))


class NormalPaths:
    """Classifies standard_normal draws by the path numpy's ziggurat takes, from the raw 64-bit words."""

    def __init__(self, tables):
        self.ki = tables["ki_double"]

    def classify(self, bit_generator):
        """Draws one standard normal; returns (value, path, raw words consumed)."""
        before = bit_generator.state
        probe = np.random.PCG64()
        probe.state = before
        word = int(probe.random_raw())
        idx = word & 0xFF
        rabs = (word >> 9) & MASK52
        value = float(np.random.Generator(bit_generator).standard_normal())
        after = bit_generator.state
        probe.state = before
        consumed = 0
        while probe.state != after:
            probe.random_raw()
            consumed += 1
            assert consumed < 1000
        if rabs < self.ki[idx]:
            path = "fast"
        elif idx == 0:
            sign = "negative" if (rabs >> 8) & 1 else "positive"
            path = f"tail_{'accept' if consumed == 3 else 'reject'}_{sign}"
        else:
            path = f"wedge_{'accept' if consumed == 2 else 'reject'}"
        return value, path, consumed


def main():
    tables_path = pathlib.Path(__file__).resolve().parents[2] / "data" / "numpy" / "numpy_ziggurat_tables.json"
    with open(tables_path) as f:
        tables = json.load(f)
    paths = NormalPaths(tables)
    out = {"numpy_version": np.__version__,
           "seed_sequence": [{"seed": s, "words": [int(w) for w in
                                                   np.random.SeedSequence(s).generate_state(4, np.uint64)]}
                             for s in SEED_SEQUENCE_SEEDS],
           "seeds": []}
    path_counts = {}
    for seed in SEEDS:
        entry = {"seed": seed}
        bg = np.random.PCG64(seed)
        entry["initial_state"] = state_dict(bg)
        entry["next64"] = [int(v) for v in bg.random_raw(20)]
        entry["state_after_next64"] = state_dict(bg)

        # Mixed next32 / next64 / random(): next64 neither uses nor clears the 32-bit buffer.
        bg = np.random.PCG64(seed)
        gen = np.random.Generator(bg)
        seq = []
        for op in INTERLEAVED_OPS:
            if op == "3":
                seq.append(["next32", next32(bg)])
            elif op == "6":
                seq.append(["next64", int(bg.random_raw())])
            else:
                seq.append(["random", float(gen.random())])
        entry["interleaved"] = seq
        entry["state_after_interleaved"] = state_dict(bg)

        # Bounded draws, one generator throughout (so some 32-bit draws start from a buffered half).
        bg = np.random.PCG64(seed)
        gen = np.random.Generator(bg)
        bounded = []
        for m in BOUNDED_MAXES:
            draws = [int(gen.integers(0, m, endpoint=True)) for _ in range(BOUNDED_DRAWS)]
            bounded.append({"max": m, "draws": draws, "state_after": state_dict(bg)})
        entry["bounded"] = bounded

        choices = []
        for n, k in CHOICES:
            bg = np.random.PCG64(seed)
            result = [int(v) for v in np.random.Generator(bg).choice(n, k, replace=False)]
            assert len(set(result)) == k and all(0 <= v < n for v in result)
            c = {"n": n, "k": k, "state_after": state_dict(bg)}
            if k <= CHOICE_FULL_MAX:
                c["values"] = result
            else:
                c["fnv1a64"] = fnv1a64(result)
            choices.append(c)
        entry["choice"] = choices
        perms = []
        for n in PERMUTATIONS:
            bg = np.random.PCG64(seed)
            perms.append({"n": n, "values": [int(v) for v in np.random.Generator(bg).choice(n, n, replace=False)],
                          "state_after": state_dict(bg)})
        entry["permutation"] = perms

        bg = np.random.PCG64(seed)
        normals = []
        for _ in range(NORMALS):
            value, path, _ = paths.classify(bg)
            normals.append(value)
            path_counts[path] = path_counts.get(path, 0) + 1
        entry["standard_normal"] = normals
        entry["state_after_standard_normal"] = state_dict(bg)

        bg = np.random.PCG64(seed)
        gen = np.random.Generator(bg)
        entry["normal"] = [{"mean": m, "stddev": s, "values": [float(gen.normal(m, s)) for _ in range(5)]}
                           for m, s in NORMAL_PARAMS]
        entry["state_after_normal"] = state_dict(bg)

        # A saved mid-stream state (with a buffered half) and what follows it.
        bg = np.random.PCG64(seed)
        gen = np.random.Generator(bg)
        gen.standard_normal(7)
        next32(bg)
        saved = state_dict(bg)
        entry["resume"] = {"state": saved, "next32": [next32(bg) for _ in range(5)],
                           "next64": [int(v) for v in bg.random_raw(3)], "random": [float(gen.random())]}
        out["seeds"].append(entry)

    # Rare ziggurat paths, found by walking seed 0's normal stream: the state just before such a draw and
    # the draws that follow.
    wanted = ["tail_accept_positive", "tail_accept_negative", "tail_reject_positive", "tail_reject_negative",
              "wedge_accept", "wedge_reject"]
    special = {}
    bg = np.random.PCG64(0)
    for _ in range(2_000_000):
        before = state_dict(bg)
        value, path, consumed = paths.classify(bg)
        if path in wanted and path not in special:
            special[path] = {"path": path, "state": before, "consumed": consumed, "values": [value]}
            probe = np.random.PCG64()
            set_state(probe, state_dict(bg))
            special[path]["values"] += [float(v) for v in np.random.Generator(probe).standard_normal(3)]
            if len(special) == len(wanted):
                break
    missing = [w for w in wanted if w not in special]
    assert not missing, missing
    out["normal_paths"] = [special[w] for w in wanted]
    out["long_standard_normal"] = []
    for seed in LONG_NORMAL_SEEDS:
        bg = np.random.PCG64(seed)
        values = np.random.Generator(bg).standard_normal(LONG_NORMALS)
        out["long_standard_normal"].append({"seed": seed, "count": LONG_NORMALS,
                                            "checksum": weighted_checksum(values),
                                            "state_after": state_dict(bg)})
    out["standard_normal_path_counts"] = dict(sorted(path_counts.items()))
    for path in ["fast", "wedge_accept", "wedge_reject"]:
        assert path_counts.get(path, 0) > 0, (path, path_counts)
    print(json.dumps(out, separators=(",", ":")))
    print(json.dumps(out["standard_normal_path_counts"]), file=sys.stderr)


if __name__ == "__main__":
    main()
