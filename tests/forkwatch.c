#include "forkwatch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

double forkwatch_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The function of a gdb frame line ("#3  0x... in free (ptr=...) at ..." or
 * "#0  __lll_lock_wait (...)") appended to frames. */
static void add_frame(char *frames, size_t len, const char *line) {
  const char *f = strstr(line, " in ");
  f = f ? f + 4 : strchr(line, ' ');
  if (!f)
    return;
  while (*f == ' ')
    f++;
  size_t n = strcspn(f, " (\n");
  size_t used = strlen(frames);
  if (used + n + 5 >= len)
    return;
  snprintf(frames + used, len - used, "%s%.*s", used ? " <- " : "", (int)n, f);
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
    s->allocator = s->allocator || strstr(line, "SizeClassAllocator64") != NULL;
    s->clpin = s->clpin || (clpin_src && strstr(line, clpin_src) != NULL);
    if (line[0] == '#') {
      s->any = true;
      add_frame(s->frames, sizeof s->frames, line);
    }
  }
  pclose(p);
}

int forkwatch_reap(pid_t pid, double limit, const char *clpin_src, forkwatch_stacks *hung) {
  double end = forkwatch_now() + limit;
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return status;
    if (r != 0 && errno != EINTR)
      return -3;
    if (forkwatch_now() > end) {
      forkwatch_stacks s;
      stacks_of(pid, clpin_src, &s);
      if (hung)
        *hung = s;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

bool forkwatch_is_runtime(const forkwatch_stacks *s) {
  return FORKWATCH_SANITIZED && s->any && s->allocator && !s->clpin;
}
