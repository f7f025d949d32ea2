"""Store-folder mutation fuzzer (issue "Integrity under damage").

A small reference store is built once per run (``reference.py``: 32 KiB commit-log files, 32-unit
consume-queue files, 64-slot/256-entry index files, three topics, seven queues, tags, keys, batches, a delay
message; a clean variant and a "crashed" one with an ``abort`` file). Each case copies it and damages the
copy with mutations drawn from ``random.Random("SEED:I")`` (``mutate.py``), then runs every read path on it
in a child process with a time limit (``driver.py``): the CLI (``verify``, ``inspect``) on a sample, the
offline tools, a read-only open, a read-write open with a few puts read back. ``runner.py`` classifies:

* ``ok`` — nothing to report;
* ``corrupt`` — ``StoreCorruptedError`` with a non-empty ``path`` and an int ``offset`` (the store saw the damage);
* ``exception`` — any other exception (a bare ``StoreError``, ``OverflowError``, ``RecursionError``, ...), or a
  CLI run with a traceback or an exit code other than 0 and 1;
* ``loss`` — an open succeeded, yet a record whose bytes are intact (outside every damaged range, its file
  neither deleted nor swapped) is not served by ``get_message`` on its queue or by ``look_message_by_offset``;
* ``wrong`` — a served message differs from what was put, or sits at an offset where nothing was put, or an
  unfiltered FOUND page skips units, or an acknowledged put cannot be read back;
* ``timeout`` / ``signal`` — the child hung (killed after the limit) or died by a signal.

    make fuzz N=1000 SEED=1              # or: python -m tests.fuzz -n 1000 --seed 1
    python -m tests.fuzz --case 1:17     # one case, its mutations and every observation; keeps the store
"""
