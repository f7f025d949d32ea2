"""The store as a whole: the ``MessageStore`` facade, opening and wiring its parts, recovery,
the checkpoint, cleaning, the delay service, the post-put waits, verify and inspect.
"""
