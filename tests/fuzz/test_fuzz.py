"""The store-folder mutation fuzzer as part of the suite (tests/fuzz/__init__.py says what it does).

* the harness itself: plans are reproducible, and an undamaged store is ``ok`` on every read path (a
  harness that cries wolf is worse than none);
* a fixed-seed run of 300 cases (2 workers) with no bad outcome: no exception other than
  ``StoreCorruptedError`` with a path and an offset, no crash, no hang, no wrong answer, no collateral loss;
* the same for 40 cases of the timer reference (pending and delivered timers), whose timer files are damaged.
"""

from __future__ import annotations

import os
import sys

import pytest

# the harness is the package tests.fuzz (its children run `python -m tests.fuzz.driver` from the repository root)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.fuzz import mutate, runner  # noqa: E402
from tests.fuzz.common import BAD  # noqa: E402

SEED = 20261126
CASES = 300


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    ref = str(tmp_path_factory.mktemp("fuzz") / "ref")
    return ref, runner.build_reference(ref)


def test_plans_are_reproducible(reference):
    _, layout = reference
    assert [mutate.plan(SEED, i, layout) for i in range(50)] == [mutate.plan(SEED, i, layout) for i in range(50)]
    assert mutate.plan(SEED, 1, layout) != mutate.plan(SEED + 1, 1, layout)


@pytest.mark.parametrize("variant", ["clean", "crashed"])
def test_undamaged_store_is_ok(reference, tmp_path, variant):
    """A case without mutations runs every read path and the CLI and finds nothing to report."""
    ref, layout = reference
    plan = {"case": "0:0", "variant": variant, "kind": "none", "ops": [], "notes": []}
    res = runner.run_case(0, 0, ref, layout, str(tmp_path), cli=variant == "clean", plan=plan,
                          spark=runner.has_spark())
    assert res["outcome"] == "ok", res
    assert res["obs"] == [], res


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fixed_seed_run_has_no_bad_outcome():
    results = runner.run(CASES, SEED, workers=2, cli_every=20, timeout=10.0, progress=False)
    bad = [r for r in results if r["outcome"] in BAD]
    assert not bad, "\n" + runner.table(results, SEED) + "\nreproduce: cd %s && python -m tests.fuzz --case %s" % (
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), bad[0]["case"])


TIMER_CASES = 40


@pytest.fixture(scope="module")
def timer_reference(tmp_path_factory):
    ref = str(tmp_path_factory.mktemp("fuzz") / "ref-timers")
    return ref, runner.build_reference(ref, timers=True)


def test_timer_plans_are_reproducible_and_damage_only_timer_files(timer_reference):
    _, layout = timer_reference
    plans = [mutate.plan_timer(SEED, i, layout) for i in range(50)]
    assert plans == [mutate.plan_timer(SEED, i, layout) for i in range(50)]
    files = {op.get("file", op.get("a")) for p in plans for op in p["ops"]}
    assert files and all(f.startswith("timerlog/") or f in ("timerwheel", "config/timercheck") for f in files), files


@pytest.mark.parametrize("variant", ["clean", "crashed"])
def test_undamaged_timer_store_is_ok(timer_reference, tmp_path, variant):
    """The timer reference (pending and delivered timers) without damage: every read path and the CLI find nothing."""
    ref, layout = timer_reference
    plan = {"case": "t0:0", "variant": variant, "kind": "none", "ops": [], "notes": [], "timers": True}
    res = runner.run_case(0, 0, ref, layout, str(tmp_path), cli=variant == "clean", plan=plan)
    assert res["outcome"] == "ok", res
    assert res["obs"] == [], res


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fixed_seed_timer_run_has_no_bad_outcome():
    """Damaged timer files (timerlog/, timerwheel, config/timercheck): refused with StoreCorruptedError naming the
    file, or opened without a wrong delivery (a message no timer to that topic and queue carried), a crash or a
    hang, and without hiding any record of the commit log."""
    results = runner.run(TIMER_CASES, SEED, workers=2, cli_every=10, timeout=10.0, progress=False, timers=True)
    bad = [r for r in results if r["outcome"] in BAD]
    assert not bad, "\n" + runner.table(results, SEED) + "\nreproduce: python -m tests.fuzz --case %s" % bad[0]["case"]


#: Cases of ``make fuzz`` runs that found a defect (SEED:INDEX), kept as regression tests once fixed.
FOUND = [
    "2:821", "2:1799", "4:2334", "4:2418", "4:4020", "5:364", "5:853", "5:991", "5:2359", "5:2793", "5:4249",
    "6:4039", "8:582", "10:3846", "39:178", "39:184",
]


@pytest.mark.parametrize("case", FOUND)
def test_cases_that_found_defects_stay_fixed(reference, tmp_path, case):
    seed, index = (int(x) for x in case.split(":"))
    ref, layout = reference
    res = runner.run_case(seed, index, ref, layout, str(tmp_path), cli=False, spark=runner.has_spark())
    assert res["outcome"] not in BAD, res
