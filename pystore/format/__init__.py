"""The bytes: the commit-log record layout (encode, check, decode), its properties string, hosts,
Java strings, the CRC, the field offsets every header reader takes.
"""

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
