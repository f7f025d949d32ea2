/* LD_PRELOAD shim for writers on the power-cut layer (tests/powerloss): posix_fallocate in one request.
 *
 * pyfuse3 has no FUSE FALLOCATE op, so fallocate(2) fails with EOPNOTSUPP on the mount and glibc's
 * posix_fallocate falls back to writing one zero byte per 4 KiB block: one FUSE request each, and a writer
 * SIGKILLed inside that loop leaves a file cut at a block boundary, which ext4's fallocate (one system call)
 * never does. This shim keeps the real call when it works and otherwise grows the file with one ftruncate
 * (one FUSE setattr: atomic, and a size change to the layer's models, as fallocate is on a real disk). It
 * does not reserve blocks, so it cannot report ENOSPC: the tests do not fill the disk. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int grow(int fd, off_t offset, off_t len) {
    struct stat st;
    if (offset < 0 || len <= 0)
        return EINVAL;
    if (syscall(SYS_fallocate, fd, 0, offset, len) == 0)
        return 0;
    if (errno != EOPNOTSUPP)
        return errno;
    if (fstat(fd, &st) != 0)
        return errno;
    if (S_ISFIFO(st.st_mode))
        return ESPIPE;
    if (!S_ISREG(st.st_mode))
        return ENODEV;
    if (st.st_size < offset + len && ftruncate(fd, offset + len) != 0)
        return errno;
    return 0;
}

int posix_fallocate(int fd, off_t offset, off_t len) { return grow(fd, offset, len); }
int posix_fallocate64(int fd, off_t offset, off_t len) { return grow(fd, offset, len); }
