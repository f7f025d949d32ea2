# cython: language_level=3
"""The names of a log's files (the commit log's, a consume queue's): each is named by the absolute offset of its
first byte, RocketMQ's ``offset2FileName`` (20 zero-padded decimal digits, docs/format.md §5.3). Every listing
of a log's folder keeps the names ``is_file_name`` accepts; ``MappedFile`` takes its start offset from its
file's name (``name_offset``, in the .pxd)."""


def offset_to_file_name(long long offset):
    """RocketMQ's ``offset2FileName``: the offset as 20 zero-padded decimal digits."""
    if offset < 0:
        raise ValueError("a file offset cannot be negative: %d" % offset)
    return "%020d" % offset


cpdef bint is_file_name(str name):
    """Is ``name`` a data file's name, ``offset_to_file_name`` of its start offset (20 ASCII digits)? The one
    test every listing of a commit-log or consume-queue folder applies: anything else there is not the log's."""
    return len(name) == 20 and name.isascii() and name.isdigit()


cdef int64_t name_offset(str name):
    return int(name) if is_file_name(name) else 0
