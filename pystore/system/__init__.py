"""What every part stands on: the service thread, the injected clock and disk usage, the running
flags, the cross-process wake-up word, durable directory names, named crash points.
"""

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
