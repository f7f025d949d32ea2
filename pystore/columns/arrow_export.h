/* pystore: a built batch's ArrowArrays (Arrow's C data interface) and their release; declared in _arrow_export.pxd */
#ifndef PYSTORE_ARROW_EXPORT_H
#define PYSTORE_ARROW_EXPORT_H

#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* Arrow's C data interface (https://arrow.apache.org/docs/format/CDataInterface.html), as Arrow defines it */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
#endif

/* the batch, its columns (at most 19), the keys' strings, the properties' entries and their keys and values */
#define PS_ARRAYS 24

/* The ArrowArrays of one batch and its columns in one block; `keep` holds the pyarrow buffers they point into
   until Arrow releases the batch. */
typedef struct {
    struct ArrowArray a[PS_ARRAYS];
    struct ArrowArray *kids[PS_ARRAYS];
    const void *bufs[3 * PS_ARRAYS];
    PyObject *keep;
} ps_batch;

/* a column's or child's release: its memory is the batch's block, released with the batch */
static inline void ps_release_kid(struct ArrowArray *a) { a->release = NULL; }

/* the batch's release: its children's, then the buffers it kept (with the GIL: Arrow may release from any
   thread), then the block */
static inline void ps_release_batch(struct ArrowArray *a) {
    ps_batch *e = (ps_batch *)a->private_data;
    int i;
    for (i = 1; i < PS_ARRAYS; i++)
        if (e->a[i].release) e->a[i].release(&e->a[i]);
    if (e->keep) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF(e->keep);
        PyGILState_Release(g);
    }
    free(e);
    a->release = NULL;
}

#endif
