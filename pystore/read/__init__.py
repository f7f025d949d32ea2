"""Reading: ``get_message``'s compiled scan, the frameless queue reader and its follow of a live writer,
the cross-process wake-up word, arrival listeners and waits, and the read results.
"""

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
