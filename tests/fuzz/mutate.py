"""Mutations: what case ``SEED:I`` does to its copy of the reference store, and which bytes it damaged.

``plan(seed, i, layout)`` draws the case from ``random.Random("SEED:I")`` and the reference's layout only, so a
case is the same on every run. A plan is JSON: the variant (``clean`` or ``crashed``), its kind (the table's
row) and concrete operations (write bytes at a position, truncate, append, zero, delete, swap, replace,
mkdir). ``apply(plan, root)`` performs them and returns the damage: per file the byte ranges that differ
from the reference (``[start, end)``), the files that are gone or hold another file's bytes (``dead``), and
whether the checkpoint was touched. The driver protects (expects readable) every record whose bytes are
outside all of it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct

from tests.fuzz.common import CL_FILE, CQ_UNIT, HASH_SLOTS, INDEX_HEADER, TIMER_SLOT, TIMER_UNIT

KINDS = ["bitflip", "overwrite", "size_field", "cq_unit", "truncate", "extend", "zero_file", "delete_file",
         "swap_files", "garbage_meta", "big_queue_dir", "index_chain"]
WEIGHTS = [12, 12, 10, 10, 9, 5, 5, 9, 6, 10, 3, 9]
#: record header fields worth hitting: TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET,
#: SYSFLAG, BORNTIMESTAMP, STORETIMESTAMP, BODYLENGTH (IPv4 hosts)
HEADER_FIELDS = [0, 4, 8, 12, 16, 20, 28, 36, 40, 56, 84]


class Planner:
    def __init__(self, seed: int, i: int, layout: dict) -> None:
        self.rng = random.Random("%d:%d" % (seed, i))
        self.lay = layout
        self.ops: list[dict] = []
        self.notes: list[str] = []

    # ---- targets ------------------------------------------------------------------------------
    def cl_file(self) -> dict:
        return self.rng.choice(self.lay["cl"])

    def cl_record(self) -> tuple[dict, int, int]:
        f = self.rng.choice([f for f in self.lay["cl"] if f["records"]])
        pos, size = self.rng.choice(f["records"])
        return f, pos, size

    def queue(self) -> list[dict]:
        return self.lay["cq"][self.rng.choice(sorted(self.lay["cq"]))]

    def cq_file(self) -> dict:
        return self.rng.choice(self.queue())

    def index_file(self) -> dict:
        return self.rng.choice(self.lay["index"])

    def any_file(self) -> tuple[str, int]:
        cat = self.rng.choices(["cl", "cq", "index", "meta"], [40, 30, 15, 15])[0]
        if cat == "cl":
            f = self.cl_file()
        elif cat == "cq":
            f = self.cq_file()
        elif cat == "index":
            f = self.index_file()
        else:
            name = self.rng.choice(self.lay["meta"])
            return name, -1
        return f["file"], f["size"]

    def place(self) -> tuple[str, int, str]:
        """A file and a position that matters (record header, unit field, index slot/entry) or a random one."""
        r = self.rng
        cat = r.choices(["cl_header", "cl_body", "cl_any", "cq_unit", "cq_any", "index", "meta"],
                        [30, 10, 10, 18, 5, 15, 12])[0]
        if cat == "cl_header":
            f, pos, size = self.cl_record()
            field = r.choice(HEADER_FIELDS)
            return f["file"], pos + field + r.randrange(4), "header+%d of record %d" % (field, int(f["file"][-20:]) + pos)
        if cat == "cl_body":
            f, pos, size = self.cl_record()
            return f["file"], pos + 88 + r.randrange(max(1, size - 88)), "inside record %d" % (int(f["file"][-20:]) + pos)
        if cat == "cl_any":
            f = self.cl_file()
            return f["file"], r.randrange(f["size"]), "random"
        if cat in ("cq_unit", "cq_any"):
            f = self.cq_file()
            if cat == "cq_unit" and f["units"]:
                u = r.randrange(f["units"])
                return f["file"], u * CQ_UNIT + r.randrange(CQ_UNIT), "unit %d" % u
            return f["file"], r.randrange(f["size"]), "random"
        if cat == "index":
            f = self.index_file()
            what = r.choice(["header", "slot", "entry"])
            if what == "header":
                return f["file"], r.randrange(INDEX_HEADER), "index header"
            if what == "slot":
                s = r.choice(f["slots"]) if f["slots"] and r.random() < 0.8 else r.randrange(HASH_SLOTS)
                return f["file"], INDEX_HEADER + 4 * s + r.randrange(4), "slot %d" % s
            e = r.randrange(1, max(2, f["count"]))
            return f["file"], INDEX_HEADER + 4 * HASH_SLOTS + 20 * e + r.randrange(20), "entry %d" % e
        name = r.choice(self.lay["meta"])
        return name, r.randrange(64 if name != "checkpoint" else 64), "random"

    # ---- operations ---------------------------------------------------------------------------
    def write(self, file: str, pos: int, data: bytes, why: str) -> None:
        self.ops.append({"op": "write", "file": file, "pos": pos, "hex": data.hex()})
        self.notes.append("%s %s@%d (%s)" % ("write%d" % len(data), file, pos, why))

    def op(self, note: str, **kw) -> None:
        self.ops.append(kw)
        self.notes.append(note)

    # ---- kinds --------------------------------------------------------------------------------
    def bitflip(self) -> None:
        file, pos, why = self.place()
        mask = 0
        while not mask:
            mask = sum(1 << b for b in self.rng.sample(range(8), self.rng.choice((1, 1, 2, 3))))
        self.op("bitflip %s@%d ^0x%02x (%s)" % (file, pos, mask, why), op="xor", file=file, pos=pos, mask=mask)

    def overwrite(self) -> None:
        r = self.rng
        file, pos, why = self.place()
        n = r.choice((1, 2, 4, 8, 16, 64, 300, 4096))
        fill = r.choice(["random", "zeros", "ff"])
        data = r.randbytes(n) if fill == "random" else (b"\0" if fill == "zeros" else b"\xff") * n
        self.write(file, pos, data, why + ", " + fill)

    def size_field(self) -> None:
        r = self.rng
        if r.random() < 0.15:                  # the end-of-file blank record's size
            f = r.choice([f for f in self.lay["cl"] if f["blank"] >= 0])
            pos, what = f["blank"], "blank"
            size = CL_FILE - pos
        else:
            f, pos, size = self.cl_record()
            what = "record %d" % (int(f["file"][-20:]) + pos)
        v = r.choice([0, -1, -size, -(2 ** 31), 2 ** 31 - 1, CL_FILE, CL_FILE * 3, 7,
                      size + r.choice((-8, -4, -1, 1, 2, 4, 8, 20, 100))])
        self.write(f["file"], pos, struct.pack(">i", v), "TOTALSIZE of %s: %d -> %d" % (what, size, v))

    def cq_unit(self) -> None:
        r = self.rng
        q = [f for f in self.queue() if f["units"]]
        f = r.choice(q)
        u = r.randrange(f["units"])
        recs = [(int(c["file"][-20:]) + p, s) for c in self.lay["cl"] for p, s in c["records"]]
        field = r.choice(["phy", "phy", "size", "tags", "all"])
        if field == "phy":
            off, _ = r.choice(recs)
            v = r.choice([off, off, off + r.randrange(1, 40), -1, 2 ** 62, recs[-1][0] + recs[-1][1], 0])
            self.write(f["file"], u * CQ_UNIT, struct.pack(">q", v), "unit %d phyOffset -> %d" % (u, v))
        elif field == "size":
            v = r.choice([0, -1, 1, 2 ** 31 - 1, r.choice(recs)[1], 4 * CL_FILE])
            self.write(f["file"], u * CQ_UNIT + 8, struct.pack(">i", v), "unit %d size -> %d" % (u, v))
        elif field == "tags":
            v = r.randrange(-2 ** 63, 2 ** 63)
            self.write(f["file"], u * CQ_UNIT + 12, struct.pack(">q", v), "unit %d tagsCode -> %d" % (u, v))
        else:
            data = r.choice([bytes(CQ_UNIT), b"\xff" * CQ_UNIT, r.randbytes(CQ_UNIT)])
            self.write(f["file"], u * CQ_UNIT, data, "unit %d replaced" % u)

    def truncate(self) -> None:
        r = self.rng
        cat = r.choices(["cl", "cq", "index"], [50, 35, 15])[0]
        if cat == "cl":
            f = self.cl_file()
            cands = [0, 1, f["size"] - 8, f["size"] // 2]
            if f["records"]:
                pos, size = r.choice(f["records"])
                cands += [pos, pos + r.randrange(1, size)]
        elif cat == "cq":
            f = self.cq_file()
            u = r.randrange(max(1, f["units"]))
            cands = [0, 1, u * CQ_UNIT, u * CQ_UNIT + r.randrange(1, CQ_UNIT), f["size"] - 1]
        else:
            f = self.index_file()
            cands = [0, 1, INDEX_HEADER - 1, INDEX_HEADER + 4 * HASH_SLOTS, f["size"] - 20, r.randrange(f["size"])]
        n = r.choice(cands)
        self.op("truncate %s to %d (was %d)" % (f["file"], n, f["size"]), op="truncate", file=f["file"], len=n)

    def extend(self) -> None:
        r = self.rng
        file, _ = self.any_file()
        n = r.choice((1, 8, 20, 640, 4096, CL_FILE))
        zeros = r.random() < 0.5
        data = bytes(n) if zeros else r.randbytes(n)
        self.op("append %d %s to %s" % (n, "zeros" if zeros else "random bytes", file), op="append", file=file,
                hex=data.hex())

    def zero_file(self) -> None:
        file, _ = self.any_file()
        self.op("zero %s" % file, op="zero", file=file)

    def delete_file(self) -> None:
        r = self.rng
        cat = r.choices(["cl", "cq_mid", "cq", "index", "meta"], [35, 20, 20, 10, 15])[0]
        if cat == "cl":
            file = self.cl_file()["file"]
        elif cat == "cq_mid":
            qs = [q for q in self.lay["cq"].values() if len(q) >= 3] or list(self.lay["cq"].values())
            q = r.choice(qs)
            file = q[len(q) // 2]["file"]
        elif cat == "cq":
            file = self.cq_file()["file"]
        elif cat == "index":
            file = self.index_file()["file"]
        else:
            file = r.choice(self.lay["meta"])
        self.op("delete %s" % file, op="delete", file=file)

    def swap_files(self) -> None:
        r = self.rng
        cat = r.choices(["cl", "cq_same", "cq_any", "index"], [45, 20, 20, 15])[0]
        if cat == "cl":
            a, b = r.sample(self.lay["cl"], 2)
        elif cat == "cq_same":
            q = r.choice([q for q in self.lay["cq"].values() if len(q) >= 2])
            a, b = r.sample(q, 2)
        elif cat == "cq_any":
            a, b = r.sample([f for q in self.lay["cq"].values() for f in q], 2)
        else:
            a, b = r.sample(self.lay["index"], 2)
        self.op("swap %s <-> %s" % (a["file"], b["file"]), op="swap", a=a["file"], b=b["file"])

    def garbage_meta(self) -> None:
        r = self.rng
        target = r.choice(["checkpoint", "abort", "lock", "config/delayOffset.json", "config/delayOffset.json"])
        if target == "config/delayOffset.json":
            choice = r.choice(["nested", "nested_obj", "bytes", "empty", "types", "bignum", "truncated"])
            if choice in ("nested", "nested_obj"):
                d = r.choice((1000, 100_000))
                self.op("%s = %s JSON %d deep" % (target, choice, d), op="replace", file=target, nested=d,
                        obj=choice == "nested_obj")
                return
            data = {
                "bytes": r.randbytes(r.choice((3, 100, 5000))),
                "empty": b"",
                "types": r.choice([b'{"offsetTable": "x"}', b'{"offsetTable": {"18": "x"}}', b"null", b"[1, 2]",
                                   b'{"offsetTable": {"x": 1}}', b'{"offsetTable": [1]}', b'"str"']),
                "bignum": r.choice([b'{"offsetTable": {"18": 1e999}}',
                                    b'{"offsetTable": {"99999999999999999999999": 1}}',
                                    b'{"offsetTable": {"18": 99999999999999999999999}}',
                                    b'{"offsetTable": {"18": -5}}', b'{"offsetTable": {"0": 3}}']),
                "truncated": b'{"offsetTable": {"1',
            }[choice]
        elif target == "checkpoint":
            choice = r.choice(["random", "zeros", "ff", "short", "empty", "field"])
            if choice == "field":
                pos = r.choice((0, 8, 16)) + r.randrange(8)
                self.op("bitflip checkpoint@%d ^0xff (timestamp field)" % pos, op="xor", file=target, pos=pos,
                        mask=0xFF)
                return
            data = {"random": r.randbytes(4096), "zeros": bytes(4096), "ff": b"\xff" * 4096,
                    "short": r.randbytes(r.choice((1, 7, 23))), "empty": b""}[choice]
        else:
            choice = r.choice(["random", "empty", "big"])
            data = {"random": r.randbytes(16), "empty": b"", "big": r.randbytes(70_000)}[choice]
        self.op("%s = %s (%d bytes)" % (target, choice, len(data)), op="replace", file=target, hex=data.hex())

    def big_queue_dir(self) -> None:
        r = self.rng
        topic = r.choice(sorted({k.split("/")[0] for k in self.lay["cq"]} | {"TopicNew"}))
        name = r.choice([str(2 ** 64), str(2 ** 64 + 7), str(10 ** 30), str(2 ** 63), str(2 ** 31), "-1", "-0",
                         "0x10", "abc", "00000000000000000001"])
        src = self.cq_file()["file"] if r.random() < 0.5 else None
        self.op("mkdir consumequeue/%s/%s%s" % (topic, name, " with a copy of %s" % src if src else ""),
                op="mkdir", dir="consumequeue/%s/%s" % (topic, name), copy=src)

    def index_chain(self) -> None:
        r = self.rng
        f = self.index_file()
        count = max(2, f["count"])
        chains = [c for c in f.get("chains", ()) if len(c) >= 2]
        if chains and r.random() < 0.4:       # a cycle: an older entry of a chain points back to a newer one
            c = r.choice(chains)
            k = r.randrange(1, len(c))
            e, v = c[k], c[r.randrange(k)]
            pos = INDEX_HEADER + 4 * HASH_SLOTS + 20 * e + 16
            self.write(f["file"], pos, struct.pack(">i", v), "entry %d prevIndex -> %d (a cycle in its chain)" % (e, v))
        elif r.random() < 0.6:
            e = r.randrange(1, count)
            v = r.choice([e, e, e + r.randrange(1, 5), count + 3, 2 ** 31 - 1, -1, -(2 ** 31), e - 1])
            pos = INDEX_HEADER + 4 * HASH_SLOTS + 20 * e + 16
            self.write(f["file"], pos, struct.pack(">i", v), "entry %d prevIndex -> %d" % (e, v))
        else:
            s = r.choice(f["slots"]) if f["slots"] else r.randrange(HASH_SLOTS)
            v = r.choice([count - 1, count + 5, 2 ** 31 - 1, -1, 0, 1])
            self.write(f["file"], INDEX_HEADER + 4 * s, struct.pack(">i", v), "slot %d -> %d" % (s, v))

    def none(self) -> None:
        self.notes.append("no mutation (baseline)")


def plan(seed: int, i: int, layout: dict) -> dict:
    p = Planner(seed, i, layout)
    r = p.rng
    variant = "crashed" if r.random() < 0.35 else "clean"
    roll = r.random()
    if roll < 0.02:
        kind = "none"
        p.none()
    elif roll < 0.15:
        kind = "multi"
        for k in r.choices(KINDS, WEIGHTS, k=r.randint(2, 3)):
            getattr(p, k)()
    else:
        kind = r.choices(KINDS, WEIGHTS)[0]
        getattr(p, kind)()
    # the CLI's verify walks the commit-log files in sequence: worth running whenever one is gone, cut, swapped
    # or extended (other cases get it on a sample: runner.run's cli_every)
    cli = any(op["op"] in ("delete", "truncate", "swap", "append") and op.get("file", op.get("a", "")).startswith(
        "commitlog/") for op in p.ops)
    return {"case": "%d:%d" % (seed, i), "variant": variant, "kind": kind, "ops": p.ops, "notes": p.notes,
            "cli": cli}


def _nested(depth: int, obj: bool) -> bytes:
    if obj:
        return b'{"offsetTable": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"
    return b"[" * depth + b"]" * depth


def apply(plan_: dict, root: str) -> dict:
    """Perform the plan's operations on ``root``; the damage, in reference coordinates."""
    ranges: dict[str, list[list[int]]] = {}
    dead: set[str] = set()
    swapped: set[str] = set()
    touched: set[str] = set()

    def hit(file: str, start: int, end: int) -> None:
        if end > start:
            ranges.setdefault(file, []).append([start, end])
        touched.add(file)

    for op in plan_["ops"]:
        kind = op["op"]
        if kind in ("write", "xor", "truncate", "append", "zero", "replace", "delete"):
            path = os.path.join(root, op["file"])
            exists = os.path.exists(path)
            size = os.path.getsize(path) if exists else 0
        if kind == "write":
            if not exists:
                continue
            data = bytes.fromhex(op["hex"])
            with open(path, "r+b") as f:
                f.seek(op["pos"])
                f.write(data)
            hit(op["file"], op["pos"], op["pos"] + len(data))
        elif kind == "xor":
            if not exists or op["pos"] >= size:
                continue
            with open(path, "r+b") as f:
                f.seek(op["pos"])
                b = f.read(1)[0] ^ op["mask"]
                f.seek(op["pos"])
                f.write(bytes([b]))
            hit(op["file"], op["pos"], op["pos"] + 1)
        elif kind == "truncate":
            if not exists:
                continue
            os.truncate(path, op["len"])
            hit(op["file"], op["len"], size)
        elif kind == "append":
            if not exists:
                continue
            data = bytes.fromhex(op["hex"])
            with open(path, "ab") as f:
                f.write(data)
            hit(op["file"], size, size + len(data))
        elif kind == "zero":
            if not exists:
                continue
            with open(path, "r+b") as f:
                f.write(bytes(size))
            hit(op["file"], 0, size)
        elif kind == "replace":
            data = _nested(op["nested"], op.get("obj", False)) if "nested" in op else bytes.fromhex(op["hex"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            hit(op["file"], 0, max(size, len(data), 1))
        elif kind == "delete":
            if exists:
                os.remove(path)
            dead.add(op["file"])
            touched.add(op["file"])
        elif kind == "swap":
            a, b = os.path.join(root, op["a"]), os.path.join(root, op["b"])
            if os.path.exists(a) and os.path.exists(b):
                tmp = a + ".swap"
                os.rename(a, tmp)
                os.rename(b, a)
                os.rename(tmp, b)
            dead.update((op["a"], op["b"]))
            swapped.update((op["a"], op["b"]))
            touched.update((op["a"], op["b"]))
        elif kind == "mkdir":
            d = os.path.join(root, op["dir"])
            os.makedirs(d, exist_ok=True)
            if op.get("copy") and os.path.exists(os.path.join(root, op["copy"])):
                shutil.copy(os.path.join(root, op["copy"]), os.path.join(d, "00000000000000000000"))
            touched.add(op["dir"])
        else:
            raise ValueError(kind)
    return {"ranges": ranges, "dead": sorted(dead), "swapped": sorted(swapped), "checkpoint": "checkpoint" in touched,
            "touched": sorted(touched)}


if __name__ == "__main__":
    import sys

    from tests.fuzz.common import load
    lay = load(sys.argv[1])
    for i in range(int(sys.argv[2])):
        print(json.dumps(plan(7, i, lay)["notes"]))


# ---- the timer files (the timer reference: reference.build_timers) -------------------------------------------------

TIMER_KINDS = ["tl_unit", "tl_bitflip", "tl_file", "wheel_slot", "wheel_file", "timercheck", "multi_timer"]
TIMER_WEIGHTS = [30, 12, 10, 20, 6, 14, 8]
#: a unit's fields: (offset, struct format, name)
UNIT_FIELDS = [(0, ">i", "size"), (4, ">q", "prevPos"), (12, ">i", "magic"), (16, ">q", "writeTimeMs"),
               (24, ">i", "delay"), (28, ">q", "commitLogOffset"), (36, ">i", "msgSize"), (40, ">i", "realTopicHash")]
SLOT_FIELDS = [(0, ">q", "time"), (8, ">q", "firstPos"), (16, ">q", "lastPos"), (24, ">i", "num")]
CHECK_FIELDS = [(0, "lastReadTimeMs"), (8, "lastTimerLogFlushPos"), (16, "lastTimerQueueOffset"),
                (24, "masterTimerQueueOffset")]


class TimerPlanner(Planner):
    """Mutations of ``timerlog/``, ``timerwheel`` and ``config/timercheck`` of the timer reference."""

    def positions(self) -> list[int]:
        """Timer-log positions that mean something: every unit's, the log's end, and around them."""
        t = self.lay["timer"]
        out = [int(f["file"][-20:]) + TIMER_UNIT * u for f in t["log"] for u in range(len(f["units"]))]
        end = int(t["log"][-1]["file"][-20:]) + TIMER_UNIT * len(t["log"][-1]["units"])
        return out + [end, end + TIMER_UNIT, -1, 0]

    def value(self, fmt: str, name: str) -> int:
        r = self.rng
        recs = [(int(c["file"][-20:]) + p, s) for c in self.lay["cl"] for p, s in c["records"]]
        edge = [0, -1, 1, 2 ** 31 - 1, -(2 ** 31)] + ([2 ** 62, -(2 ** 63), 2 ** 63 - 1] if fmt == ">q" else [])
        if name in ("prevPos", "firstPos", "lastPos", "lastTimerLogFlushPos"):
            cands = self.positions() + [r.randrange(10 ** 6)]
        elif name in ("commitLogOffset",):
            cands = [o for o, _ in recs] + [recs[-1][0] + recs[-1][1], recs[0][0] + 1]
        elif name in ("msgSize",):
            cands = [s for _, s in recs] + [4 * CL_FILE]
        elif name in ("writeTimeMs", "time", "lastReadTimeMs"):
            cands = [1_700_000_000_000 + r.randrange(-10 ** 7, 10 ** 7), 1_700_000_000_000 // 1000]
        elif name in ("lastTimerQueueOffset", "masterTimerQueueOffset", "num"):
            cands = [r.randrange(200), 10 ** 9]
        else:
            cands = [r.randrange(-2 ** 31, 2 ** 31), 7_200_000, 1, 2, 4, 6, 16]
        v = r.choice(cands + edge if r.random() < 0.3 else cands)
        lo, hi = (-(2 ** 31), 2 ** 31 - 1) if fmt == ">i" else (-(2 ** 63), 2 ** 63 - 1)
        return max(lo, min(hi, v))

    def tl_file_unit(self) -> tuple[dict, int]:
        f = self.rng.choice([f for f in self.lay["timer"]["log"] if f["units"]])
        return f, self.rng.randrange(len(f["units"]))

    def tl_unit(self) -> None:
        f, u = self.tl_file_unit()
        at, fmt, name = self.rng.choice(UNIT_FIELDS)
        v = self.value(fmt, name)
        self.write(f["file"], u * TIMER_UNIT + at, struct.pack(fmt, v), "timer unit %d %s -> %d" % (u, name, v))

    def tl_bitflip(self) -> None:
        f, u = self.tl_file_unit()
        pos = u * TIMER_UNIT + self.rng.randrange(TIMER_UNIT)
        mask = 1 << self.rng.randrange(8)
        self.op("bitflip %s@%d ^0x%02x (timer unit %d)" % (f["file"], pos, mask, u), op="xor", file=f["file"], pos=pos,
                mask=mask)

    def tl_file(self) -> None:
        r = self.rng
        f = r.choice(self.lay["timer"]["log"])
        what = r.choice(["truncate", "truncate", "zero", "delete", "append", "swap"])
        if what == "truncate":
            n = r.choice([0, f["size"] // 2, len(f["units"]) * TIMER_UNIT, r.randrange(f["size"])])
            self.op("truncate %s to %d" % (f["file"], n), op="truncate", file=f["file"], len=n)
        elif what == "zero":
            self.op("zero %s" % f["file"], op="zero", file=f["file"])
        elif what == "delete":
            self.op("delete %s" % f["file"], op="delete", file=f["file"])
        elif what == "append":
            data = r.randbytes(r.choice((1, 52, 4096)))
            self.op("append %d bytes to %s" % (len(data), f["file"]), op="append", file=f["file"], hex=data.hex())
        elif len(self.lay["timer"]["log"]) >= 2:
            a, b = r.sample(self.lay["timer"]["log"], 2)
            self.op("swap %s <-> %s" % (a["file"], b["file"]), op="swap", a=a["file"], b=b["file"])

    def wheel_slot(self) -> None:
        r = self.rng
        slots = self.lay["timer"]["slots"]
        s = r.choice(slots) if slots and r.random() < 0.85 else r.randrange(self.lay["timer"]["wheel_size"] // TIMER_SLOT)
        at, fmt, name = r.choice(SLOT_FIELDS)
        v = self.value(fmt, name)
        if name == "time" and r.random() < 0.5:     # the slot of another time: one turn of the wheel later or earlier
            v = r.choice((1, -1)) * self.lay["timer"]["wheel_size"] // TIMER_SLOT + 1_700_000_000_000 // 1000
        self.write("timerwheel", s * TIMER_SLOT + at, struct.pack(fmt, v), "wheel slot %d %s -> %d" % (s, name, v))

    def wheel_file(self) -> None:
        r = self.rng
        size = self.lay["timer"]["wheel_size"]
        what = r.choice(["truncate", "zero", "delete", "append"])
        if what == "truncate":
            n = r.choice([0, 32, size // 2, size - 1])
            self.op("truncate timerwheel to %d" % n, op="truncate", file="timerwheel", len=n)
        elif what == "append":
            self.op("append 32 bytes to timerwheel", op="append", file="timerwheel", hex=r.randbytes(32).hex())
        else:
            self.op("%s timerwheel" % what, op=what, file="timerwheel")

    def timercheck(self) -> None:
        r = self.rng
        target = "config/timercheck"
        if r.random() < 0.7:
            at, name = r.choice(CHECK_FIELDS)
            v = self.value(">q", name)
            self.write(target, at, struct.pack(">q", v), "timercheck %s -> %d" % (name, v))
            return
        choice = r.choice(["random", "zeros", "short", "empty", "delete"])
        if choice == "delete":
            self.op("delete %s" % target, op="delete", file=target)
            return
        data = {"random": r.randbytes(4096), "zeros": bytes(4096), "short": r.randbytes(r.choice((1, 31, 55))),
                "empty": b""}[choice]
        self.op("%s = %s (%d bytes)" % (target, choice, len(data)), op="replace", file=target, hex=data.hex())

    def multi_timer(self) -> None:
        for k in self.rng.choices(TIMER_KINDS[:-1], TIMER_WEIGHTS[:-1], k=self.rng.randint(2, 3)):
            getattr(self, k)()


def plan_timer(seed: int, i: int, layout: dict) -> dict:
    """Case ``tSEED:I`` of the timer reference: its timer files damaged (the commit log, queues and index never)."""
    p = TimerPlanner(seed, i, layout)
    p.rng = random.Random("t%d:%d" % (seed, i))
    r = p.rng
    variant = "crashed" if r.random() < 0.35 else "clean"
    kind = r.choices(TIMER_KINDS, TIMER_WEIGHTS)[0]
    getattr(p, kind)()
    return {"case": "t%d:%d" % (seed, i), "variant": variant, "kind": kind, "ops": p.ops, "notes": p.notes,
            "cli": False, "timers": True}
