"""The commit log: mapped files and their positions, the log of files and its geometry, the put lock and the one put
protocol (single, batch, columns), records read back, file allocation, the transient pool, flushing.
"""

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
