# cython: language_level=3

cdef bytes encode_host(object host, bint *is_v6)
cdef tuple decode_host(const unsigned char *p, int n)
