/* pystore: threads that follow a pinned put thread onto its CPU (the store's flush service, index builder and
   prefault worker; CommitLogCore.follow_put_cpu). Shared by _bytes.pxd and prefault_worker.h. */
#ifndef PYSTORE_CPU_FOLLOW_H
#define PYSTORE_CPU_FOLLOW_H
#include <sched.h>
/* The one CPU the calling thread is pinned to (its affinity holds just that CPU), or -1: a thread the
   scheduler moves around has no place worth following. */
static inline int ps_pinned_cpu(void) {
#ifdef __linux__
    cpu_set_t set;
    int i;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1)
        return -1;
    for (i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set))
            return i;
#endif
    return -1;
}
/* A service thread that follows a pinned put thread: where it was moved (-1: where the scheduler puts it)
   and the CPU set it had before the first move, to go back to. */
typedef struct {
    int where;
#ifdef __linux__
    cpu_set_t original;
#endif
} ps_cpu_follow;
static inline void ps_cpu_follow_init(ps_cpu_follow *f) { f->where = -1; }
/* Move the calling thread to `cpu` (a put thread's pinned CPU), or back to its own CPU set when `cpu` is -1
   (the put thread is not pinned); nothing when it is there already. A CPU this process may not use (a
   cpuset) leaves it where it is. */
static inline void ps_follow_cpu(int cpu, ps_cpu_follow *f) {
#ifdef __linux__
    cpu_set_t set;
    if (cpu == f->where || cpu >= CPU_SETSIZE)
        return;
    if (cpu < 0) {
        if (sched_setaffinity(0, sizeof f->original, &f->original) == 0)
            f->where = -1;
        return;
    }
    if (f->where < 0 && sched_getaffinity(0, sizeof f->original, &f->original) != 0)
        return;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) == 0)
        f->where = cpu;
#endif
}
#endif
