/* Options: one table, read from the environment once, parsed strictly. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef enum { KIND_BOOL, KIND_SIZE, KIND_COUNT } option_kind;

typedef struct {
  const char *env;
  option_kind kind;
  size_t min, max;
} option_spec;

/* Defaults that depend on the machine are filled in by load(). The chunk size
 * and thread count come from the size sweep in docs/BENCHMARKS.md. */
static const option_spec specs[CLPIN_OPT__COUNT] = {
    [CLPIN_OPT_PINNED_H2D] = {"CLPIN_PINNED_H2D", KIND_BOOL, 0, 1},
    [CLPIN_OPT_MAX_CACHED] = {"CLPIN_MAX_CACHED", KIND_SIZE, 0, SIZE_MAX},
    [CLPIN_OPT_CHUNK] = {"CLPIN_CHUNK", KIND_SIZE, 4096, (size_t)1 << 30},
    [CLPIN_OPT_THREADS] = {"CLPIN_THREADS", KIND_COUNT, 1, 256},
    [CLPIN_OPT_DEBUG] = {"CLPIN_DEBUG", KIND_BOOL, 0, 1},
    [CLPIN_OPT_STAGE_MIN] = {"CLPIN_STAGE_MIN", KIND_SIZE, 0, SIZE_MAX},
};

/* From the H100 sweep (docs/BENCHMARKS.md, "Choosing CLPIN_CHUNK and
 * CLPIN_THREADS"): 8 MiB chunks and about three quarters of the cores were
 * best for large pageable transfers; 4 MiB with 8 threads missed every
 * pipelined target. */
#define DEFAULT_CHUNK ((size_t)8 << 20)
/* Below 1 MiB a plain transfer beats staging on the H100 (the sweep in
 * docs/BENCHMARKS.md): the host copy and the extra commands cost more than
 * pageable DMA loses. */
#define DEFAULT_STAGE_MIN ((size_t)1 << 20)
#define DEFAULT_MAX_THREADS 16

static _Atomic size_t values[CLPIN_OPT__COUNT];
static pthread_once_t loaded = PTHREAD_ONCE_INIT;
/* Set once load() has run: lets the hot path skip pthread_once. */
static atomic_bool ready;

bool clpin__parse_size(const char *text, size_t *out) {
  if (!text)
    return false;
  while (isspace((unsigned char)*text))
    text++;
  if (!isdigit((unsigned char)*text))
    return false; /* also rejects a sign */
  errno = 0;
  char *end;
  unsigned long long n = strtoull(text, &end, 10);
  if (errno == ERANGE)
    return false;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 'K': shift = 10; end++; break;
  case 'M': shift = 20; end++; break;
  case 'G': shift = 30; end++; break;
  case 'T': shift = 40; end++; break;
  default: break;
  }
  if (shift && (*end == 'i' || *end == 'I'))
    end++;
  if (*end == 'b' || *end == 'B')
    end++;
  while (isspace((unsigned char)*end))
    end++;
  if (*end != '\0')
    return false;
  if (shift && n > (SIZE_MAX >> shift))
    return false;
  if (n > SIZE_MAX)
    return false;
  *out = (size_t)n << shift;
  return true;
}

static bool parse_value(const option_spec *s, const char *text, size_t *out) {
  size_t v;
  if (s->kind == KIND_SIZE && (!strcasecmp(text, "unlimited") || !strcasecmp(text, "none")) &&
      s->max == SIZE_MAX) {
    *out = SIZE_MAX;
    return true;
  }
  if (!clpin__parse_size(text, &v))
    return false;
  if (s->kind != KIND_SIZE) {
    /* Counts and booleans take no suffix. */
    for (const char *p = text; *p; p++)
      if (!isdigit((unsigned char)*p) && !isspace((unsigned char)*p))
        return false;
  }
  if (v < s->min || v > s->max)
    return false;
  *out = v;
  return true;
}

static size_t default_value(clpin_option opt) {
  switch (opt) {
  case CLPIN_OPT_PINNED_H2D: return 1;
  case CLPIN_OPT_MAX_CACHED: return SIZE_MAX;
  case CLPIN_OPT_CHUNK: return DEFAULT_CHUNK;
  case CLPIN_OPT_STAGE_MIN: return DEFAULT_STAGE_MIN;
  case CLPIN_OPT_THREADS: {
    long n = sysconf(_SC_NPROCESSORS_ONLN) * 3 / 4;
    return n < 1 ? 1 : n > DEFAULT_MAX_THREADS ? DEFAULT_MAX_THREADS : (size_t)n;
  }
  case CLPIN_OPT_DEBUG: return 0;
  default: return 0;
  }
}

static void load(void) {
  for (int i = 0; i < CLPIN_OPT__COUNT; i++) {
    size_t v = default_value((clpin_option)i);
    const char *text = getenv(specs[i].env);
    if (text && *text) {
      size_t parsed;
      if (parse_value(&specs[i], text, &parsed))
        v = parsed;
      else
        fprintf(stderr, "clpin: ignoring %s=\"%s\" (not a valid value); using the default\n",
                specs[i].env, text);
    }
    atomic_store(&values[i], v);
  }
  atomic_store_explicit(&ready, true, memory_order_release);
}

size_t clpin__opt(clpin_option opt) {
  if (!atomic_load_explicit(&ready, memory_order_acquire))
    pthread_once(&loaded, load);
  return (unsigned)opt < CLPIN_OPT__COUNT ? atomic_load_explicit(&values[opt], memory_order_relaxed)
                                          : 0;
}

size_t clpin_get_option(clpin_option opt) { return clpin__opt(opt); }

cl_int clpin_set_option(clpin_option opt, size_t value) {
  pthread_once(&loaded, load);
  CLPIN__CHECK((unsigned)opt >= CLPIN_OPT__COUNT, CLPIN_ERR_INVALID_OPTION);
  CLPIN__CHECK(value < specs[opt].min || value > specs[opt].max, CLPIN_ERR_INVALID_OPTION);
  atomic_store(&values[opt], value);
  return CL_SUCCESS;
}

bool clpin__debug(void) { return clpin__opt(CLPIN_OPT_DEBUG) != 0; }

void clpin__log(const char *fmt, ...) {
  if (!clpin__debug())
    return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One write per line so lines from several threads do not interleave. */
  fprintf(stderr, "clpin: %s\n", line);
}
