# cython: language_level=3
"""The decoded header of one commit-log record (docs/format.md §1): what ``_codec.check_record`` fills and a
``MessageExt`` keeps, and the places of its fields (``_codec`` draws the layout). Positions are relative to the
record's first byte. Declarations only, no module: every reader of a header (``_codec.check_record``, the
page scan's ``_read._check_plain_part``, a deferring sink's ``complete_plain``) takes its offsets from here."""
from libc.stdint cimport int32_t, int64_t


cdef struct RecordView:
    int32_t total_size
    int32_t magic
    int32_t body_crc
    int32_t queue_id
    int32_t flag
    int64_t queue_offset
    int64_t phy_offset
    int32_t sys_flag
    int64_t born_ts
    int64_t store_ts
    int32_t reconsume_times
    int64_t prepared_tx_offset
    int32_t born_host_pos
    int32_t born_host_len
    int32_t store_host_pos
    int32_t store_host_len
    int32_t body_pos
    int32_t body_len
    int32_t topic_pos
    int32_t topic_len
    int32_t props_pos
    int32_t props_len


# Where each field is: the same in every record up to BORNHOST ...
cdef enum:
    AT_TOTALSIZE = 0
    AT_MAGIC = 4
    AT_BODYCRC = 8
    AT_QUEUEID = 12
    AT_FLAG = 16
    AT_QUEUEOFFSET = 20
    AT_PHYSICALOFFSET = 28
    AT_SYSFLAG = 36
    AT_BORNTIMESTAMP = 40
    AT_BORNHOST = 48

# ... then after hosts of 8 (IPv4) or 20 (IPv6) bytes; in a plain record (magic V1, both hosts IPv4) every field
# before the body is at a fixed place
cdef enum:
    IPV4_HOST_SIZE = 8
    IPV6_HOST_SIZE = 20
    PLAIN_AT_STORETIMESTAMP = AT_BORNHOST + IPV4_HOST_SIZE
    PLAIN_AT_STOREHOST = PLAIN_AT_STORETIMESTAMP + 8
    PLAIN_AT_RECONSUMETIMES = PLAIN_AT_STOREHOST + IPV4_HOST_SIZE
    PLAIN_AT_PREPAREDTXOFFSET = PLAIN_AT_RECONSUMETIMES + 4
    PLAIN_AT_BODYLENGTH = PLAIN_AT_PREPAREDTXOFFSET + 8
    PLAIN_AT_BODY = PLAIN_AT_BODYLENGTH + 4
    # the smallest record: a plain one with no body, topic or properties (a topic length byte, a properties
    # length of two)
    MIN_RECORD_SIZE = PLAIN_AT_BODY + 1 + 2
