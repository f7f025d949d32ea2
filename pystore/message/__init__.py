"""The message objects: ``Message`` and ``MessageBatch`` going in, ``MessageExt`` coming out, and the
constants (property names, system flags, tag filters) they share with RocketMQ.
"""

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
