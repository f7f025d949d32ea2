"""The archive tier: sealed files copied to object storage and read back from it."""

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
