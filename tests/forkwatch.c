/* SPDX-License-Identifier: Apache-2.0 */
#include "forkwatch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

int forkwatch_in_child;

__attribute__((visibility("default"))) int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return forkwatch_in_child; }

#ifdef __SANITIZE_THREAD__
/* ThreadSanitizer sleeps atexit_sleep_ms (1000 ms by default) in a process
 * that exits while it knows of other threads, to catch races with them; a
 * forked child inherits the parent's list of threads, so each child of a
 * busy parent slept 1 s in exit() (measured in check_fork: 1.04 s per fork;
 * 300 forks took five minutes of the tsan stage). The children's exit is
 * what is tested, not races at it: no sleep. Only in the programs that link
 * this file; TSAN_OPTIONS (the stage's suppressions) still applies on top. */
__attribute__((visibility("default"))) const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "atexit_sleep_ms=0"; }
#endif

double forkwatch_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The function of a gdb frame line ("#3  0x... in free (ptr=...) at ..." or
 * "#4  __sanitizer::Foo<__tsan::AP64>::Bar (...)") appended to frames,
 * without namespaces and template arguments (for one readable line). */
static void add_frame(char *frames, size_t len, const char *line) {
  const char *f = strstr(line, " in ");
  f = f ? f + 4 : strchr(line, ' ');
  if (!f)
    return;
  while (*f == ' ')
    f++;
  char name[256];
  size_t n = 0;
  int depth = 0;
  for (; *f && n + 1 < sizeof name; f++) {
    if (*f == '<')
      depth++;
    else if (*f == '>' && depth > 0)
      depth--;
    else if (depth == 0 && (*f == ' ' || *f == '(' || *f == '\n'))
      break;
    else if (depth == 0 && *f == ':' && f[1] == ':')
      n = 0, f++; /* drop the namespace or class so far */
    else if (depth == 0)
      name[n++] = *f;
  }
  name[n] = '\0';
  const char *from = strstr(line, " from ");
  if (strcmp(name, "??") == 0 && from) { /* no symbol: name the library */
    const char *lib = strrchr(from, '/');
    snprintf(name, sizeof name, "?? (%.*s)", (int)strcspn(lib ? lib + 1 : from + 6, "\n"),
             lib ? lib + 1 : from + 6);
    n = strlen(name);
  }
  size_t used = strlen(frames);
  if (!n || used + n + 5 >= len)
    return;
  snprintf(frames + used, len - used, "%s%s", used ? " <- " : "", name);
}

static void stacks_of(pid_t pid, const char *clpin_src, forkwatch_stacks *s) {
  memset(s, 0, sizeof *s);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "gdb -batch -p %d -ex 'thread apply all bt' 2>&1", (int)pid);
  FILE *p = popen(cmd, "r");
  if (!p)
    return;
  char line[1024];
  while (fgets(line, sizeof line, p)) {
    fputs(line, stderr);
    /* A long frame line comes in several pieces: search every piece. */
    s->allocator = s->allocator || strstr(line, "SizeClassAllocator64") != NULL ||
                   strstr(line, "DenseSlabAlloc") != NULL;
    s->lock = s->lock || strstr(line, "__sanitizer::Mutex::Lock") != NULL ||
              strstr(line, "SpinMutex::LockSlow") != NULL;
    s->clpin = s->clpin || (clpin_src && strstr(line, clpin_src) != NULL);
    if (line[0] == '#') {
      s->any = true;
      add_frame(s->frames, sizeof s->frames, line);
    }
  }
  pclose(p);
}

/* Poll for pid's end until `until`: 1 with *status, 0 still running, -1 error. */
static int wait_until(pid_t pid, double until, int *status) {
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid)
      return 1;
    if (r != 0 && errno != EINTR)
      return -1;
    if (forkwatch_now() > until)
      return 0;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

int forkwatch_reap(pid_t pid, double limit, const char *clpin_src, forkwatch_stacks *hung) {
  int status = 0;
  int r = wait_until(pid, forkwatch_now() + limit, &status);
  if (r != 0)
    return r > 0 ? status : -3;
  /* Late. Take its stacks, then give it as long again to end by itself: a
   * child that is only slow (its exit tearing down a large sanitized
   * address space on a loaded machine: seen once, 5-6 s) ends, a blocked
   * one does not. gdb shows nothing of a child already ending (a zombie). */
  forkwatch_stacks s;
  stacks_of(pid, clpin_src, &s);
  if (hung)
    *hung = s;
  r = wait_until(pid, forkwatch_now() + limit, &status);
  if (r != 0)
    return r > 0 ? status : -3;
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

bool forkwatch_is_runtime(const forkwatch_stacks *s) {
  return FORKWATCH_SANITIZED && s->any && s->allocator && s->lock && !s->clpin;
}
