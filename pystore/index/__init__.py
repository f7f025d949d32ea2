"""The key hash index: index files, their entries and bounded lookups, and the services that build them.
"""

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
