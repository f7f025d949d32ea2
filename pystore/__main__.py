"""``python -m pystore``: the ``pystore`` command line (see :mod:`pystore.cli`)."""

from pystore.cli import main

if __name__ == "__main__":
    main()
