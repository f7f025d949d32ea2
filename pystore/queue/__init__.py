"""The consume queues: 20-byte units, their files, the time search, and dispatch from the commit log.
"""

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
