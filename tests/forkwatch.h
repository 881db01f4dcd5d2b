/* SPDX-License-Identifier: Apache-2.0 */
/* Reaping forked children with a deadline, and telling whose hang it is.
 * Shared by check_fork (children of a process using clpin) and fork_control
 * (the same fork pattern with no clpin at all), so that both count hangs by
 * exactly the same rule. No Check and no clpin here. */
#ifndef CLPIN_FORKWATCH_H
#define CLPIN_FORKWATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FORKWATCH_SANITIZED 1
#else
#define FORKWATCH_SANITIZED 0
#endif

/* What gdb showed of a hung child's stacks. */
typedef struct {
  bool any;          /* gdb printed a stack at all */
  bool allocator;    /* a frame of one of the sanitizer runtime's allocators: its heap
                      * (SizeClassAllocator64) or TSan's heap-block metadata (DenseSlabAlloc) */
  bool lock;         /* a frame taking one of the runtime's own locks (Mutex, SpinMutex) */
  bool clpin;        /* a frame in a source file under clpin_src (NULL: never) */
  char frames[1024]; /* the innermost frames' functions, "f0 <- f1 <- ..." */
} forkwatch_stacks;

/* Set in each forked child. In a sanitized build the children turn
 * LeakSanitizer off (__lsan_is_turned_off): a child of a busy parent holds
 * what the parent's other threads held (their stacks are not in the
 * child), which LeakSanitizer would report; the child's exit itself is what
 * is tested. The runtime finds that function only among the executable's
 * exported symbols (ENABLE_EXPORTS). */
extern int forkwatch_in_child;

/* One of the parent's four busy threads (check_fork's use clpin,
 * fork_control's the same allocator and driver without it). */
typedef struct {
  int kind;         /* what it does: 0..3 */
  atomic_int *stop; /* set when the forks are done */
  long ops;         /* iterations done */
  int err;          /* the first unexpected code (0: none) */
} forkwatch_busy;

/* Keep err in b when it is the first unexpected code. */
static inline void forkwatch_note(forkwatch_busy *b, int err) {
  if (err != 0 && b->err == 0)
    b->err = err;
}

double forkwatch_now(void);

/* Reap pid within limit seconds. Returns its wait status; a child that
 * did not end in time has its stacks taken with gdb (printed on stderr,
 * summarised into *hung, which may be NULL) and gets limit seconds more to
 * end by itself (then its status is returned: the caller sees it late by
 * its clock); -1 when it did not, and was killed and reaped: it hung; -3
 * when waitpid failed. clpin_src: the path prefix of clpin's sources, or
 * NULL. */
int forkwatch_reap(pid_t pid, double limit, const char *clpin_src, forkwatch_stacks *hung);

/* A hang of the sanitizer runtime's own: in a sanitized build, gdb showed
 * the child waiting for one of the runtime's own locks inside one of its
 * allocators, with no frame of clpin's. GCC 12's ASan and TSan take neither
 * their heap's locks nor TSan's metadata allocator's around fork(), so a
 * child whose exit frees memory (glibc's and POCL's exit handlers do) waits
 * for good on such a lock when a thread of the parent held it at the fork:
 * the child has one thread, so the holder is gone. fork_control shows it
 * with no clpin at all. Without gdb no hang is the runtime's. */
bool forkwatch_is_runtime(const forkwatch_stacks *s);

#endif
