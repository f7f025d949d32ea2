"""Store-folder mutation fuzzer (issue "Integrity under damage").

A small reference store is built once per run (``reference.py``); each case copies it, damages it with
mutations chosen from a seeded RNG (``mutate.py``), and runs every read path on it in a child process with a
time limit (``driver.py``); ``runner.py`` classifies the outcomes and prints the table.

    make fuzz N=1000 SEED=1              # or: python -m tests.fuzz -n 1000 --seed 1
    python -m tests.fuzz --case 1:17     # one case, with its mutations and observations
"""
