# cython: language_level=3
from libc.stdint cimport int32_t, int64_t

from pystore._message cimport Message, MessageExt

cdef enum:
    MESSAGE_MAGIC_CODE = -626843481       # 0xDAA320A7, V1: 1-byte topic length
    MESSAGE_MAGIC_CODE_V2 = -626843477    # 0xDAA320AB, V2: 2-byte topic length
    BLANK_MAGIC_CODE = -875286124         # 0xCBD43194, end-of-file blank
    END_FILE_MIN_BLANK_LENGTH = 8
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20
    TRANSACTION_TYPE_MASK = 0xC
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    BIG_BODY = 262144                     # a body this big is copied into the log without the GIL

# check_record results: a positive record size, or one of these.
cdef enum:
    REC_BLANK = 0          # BLANK magic: the rest of the file is unused
    REC_END = -1           # zero size (or no room for a header): the end of written data
    REC_SHORT = -2         # the announced size runs past the readable end: a torn or half-written record
    REC_BAD_MAGIC = -3
    REC_BAD_LENGTH = -4    # the field lengths disagree with TOTALSIZE
    REC_BAD_CRC = -5


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


cdef int32_t cal_msg_length(int version, int32_t sys_flag, int32_t body_len, int32_t topic_len,
                            int32_t props_len) noexcept nogil
cdef int32_t message_length(Message m, int32_t store_sys_flag) noexcept
cdef void encode_message(unsigned char *dst, Message m, int32_t total, int64_t queue_offset, int64_t phy_offset,
                         int64_t store_ts, const unsigned char *store_host, int32_t store_flag,
                         bint release_gil) noexcept
cdef void encode_with_body(unsigned char *dst, Message m, const char *body, Py_ssize_t body_len, int32_t body_crc,
                           int32_t total, int64_t queue_offset, int64_t phy_offset, int64_t store_ts,
                           const unsigned char *store_host, int32_t store_flag, bint release_gil) noexcept
cdef void encode_like(unsigned char *dst, const unsigned char *first, int32_t body_pos, int32_t first_body_len,
                      int32_t tail_len, const char *body, Py_ssize_t body_len, int32_t body_crc, int32_t total,
                      int64_t queue_offset, int64_t phy_offset, int64_t born_ts, bint release_gil) noexcept
cdef void write_blank(unsigned char *dst, int32_t max_blank) noexcept nogil
cdef int32_t check_record(const unsigned char *p, int64_t remaining, bint check_crc,
                          RecordView *v) noexcept nogil
cdef bint find_property(const unsigned char *props, int32_t n, const char *name, int32_t name_len,
                        int32_t *vpos, int32_t *vlen) noexcept nogil
cdef int64_t tags_code_of(const unsigned char *rec, RecordView *v) noexcept nogil
cdef MessageExt make_ext(const unsigned char *p, RecordView *v)
cdef MessageExt make_ext_shared(bytes buf, int32_t base, RecordView *v)
cdef int64_t find_next_record(const unsigned char *base, int64_t start, int64_t limit,
                              int64_t file_from) noexcept nogil
cdef int64_t scan_records(const unsigned char *base, int64_t start, int64_t limit, bint check_crc,
                          int32_t *reason, int64_t *count, int64_t *last_store_ts) noexcept nogil
