# cython: language_level=3
"""The decoded header of one commit-log record (docs/format.md §1): what ``_codec.check_record`` fills and a
``MessageExt`` keeps. Positions are relative to the record's first byte. Declarations only, no module."""
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
