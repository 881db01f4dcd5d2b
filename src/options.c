/* SPDX-License-Identifier: Apache-2.0 */
/* Options: one table, read from the environment once, parsed strictly. */
#include "internal.h"
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef enum {
  KIND_TRI,   /* 0, 1 or "auto" (CLPIN_PINNED_AUTO) */
  KIND_SIZE,  /* bytes with an optional K/M/G/T suffix */
  KIND_COUNT, /* a plain decimal number */
} option_kind;

typedef struct {
  const char *env;
  option_kind kind;
  size_t min, max;
  bool unlimited;    /* "unlimited"/"none" means SIZE_MAX */
  const char *valid; /* the valid form, for warnings and the docs */
  /* For the docs only: docs/API.md's options table is generated from these
   * (ci/options-table.sh; CI fails when the two differ). Markdown, no '|'. */
  const char *dflt; /* the default, as a user writes it */
  const char *doc;  /* what the option does */
} option_spec;

/* Defaults that depend on the machine are filled in by load(). The chunk size
 * and thread count come from the size sweep in docs/BENCHMARKS.md. The chunk
 * has no maximum here: staging clamps it to the device's largest allocation
 * when it uses it. */
static const option_spec specs[CLPIN_OPT__COUNT] = {
    [CLPIN_OPT_PINNED] =
        {"CLPIN_PINNED_H2D", KIND_TRI, 0, CLPIN_PINNED_AUTO, false, "0, 1 or auto", "`auto`",
         "when `CLPIN_PIN_MEMORY` stages pageable data, for writes and reads alike: `0` not on "
         "host-unified-memory devices (CPU devices, integrated GPUs), `1` on every device, `auto` "
         "only where it pays (not on host-unified-memory devices, where staging is slower than a "
         "plain transfer)"},
    [CLPIN_OPT_MAX_CACHED] = {"CLPIN_MAX_CACHED", KIND_SIZE, 0, SIZE_MAX, true,
                              "a size such as 512M or 4G (suffixes K, M, G, T), or unlimited",
                              "unlimited", "cap on idle pinned bytes per pool"},
    [CLPIN_OPT_CHUNK] =
        {"CLPIN_CHUNK", KIND_SIZE, 4096, SIZE_MAX, false,
         "a size of at least 4K (suffixes K, M, G, T), such as 8M", "`8M`",
         "pipeline chunk size; staging uses at most the device's `CL_DEVICE_MAX_MEM_ALLOC_SIZE`"},
    [CLPIN_OPT_THREADS] = {"CLPIN_THREADS", KIND_COUNT, 1, 256, false,
                           "a whole number from 1 to 256",
                           "three quarters of the online cores (at least 1, at most 64)",
                           "host copy threads for pipelined staging: one budget for the process, "
                           "shared in turn by every pool, device and direction; one transfer "
                           "copies with at most `CLPIN_TRANSFER_THREADS` of them"},
    [CLPIN_OPT_DEBUG] = {"CLPIN_DEBUG", KIND_COUNT, 0, 2, false, "0, 1 or 2", "`0`",
                         "`1`: log the options and each distinct path decision once to stderr "
                         "(repeats are counted, and their number said at exit); `2`: every "
                         "decision, and every pool event (hit, miss, release, free)"},
    [CLPIN_OPT_LAYER_MIN] = {"CLPIN_LAYER_MIN", KIND_SIZE, 1, SIZE_MAX, false,
                             "a size of at least 1 such as 64K or 1M (suffixes K, M, G, T)", "`1M`",
                             "the OpenCL layer routes transfers of at least this size (and at "
                             "least the staging minimum) through clpin"},
    [CLPIN_OPT_STAGE_MIN] =
        {"CLPIN_STAGE_MIN", KIND_SIZE, 0, SIZE_MAX, false,
         "a size such as 256K or 1M (suffixes K, M, G, T)", "`2M`",
         "`CLPIN_PIN_MEMORY` transfers smaller than this are not pipelined: they take the plain "
         "path (staging them would not pay; measured on the H100), but for a blocking read of at "
         "most 256 KiB, which goes through one pool block"},
    [CLPIN_OPT_QUARANTINE] =
        {"CLPIN_QUARANTINE", KIND_COUNT, 0, 65536, false, "a whole number from 0 to 65536", "`0`",
         "released blocks each new pool holds back from reuse (at most 256 MiB), so a stale second "
         "release is refused (\"Errors\" below); a debug aid"},
    [CLPIN_OPT_STAGE_MIN_H2D] =
        {"CLPIN_STAGE_MIN_H2D", KIND_SIZE, 0, SIZE_MAX, false,
         "a size such as 4M or 16M (suffixes K, M, G, T)", "`16M`",
         "`CLPIN_PIN_MEMORY` writes smaller than this take the plain path too (staged writes of "
         "2-8 MiB ran at 0.72-1.7x plain from one H100 session to the next, of 16 MiB at 1.07x and "
         "more in every run: [BENCHMARKS.md](BENCHMARKS.md#engine))"},
    [CLPIN_OPT_NUMA] = {"CLPIN_NUMA", KIND_TRI, 0, CLPIN_NUMA_AUTO, false, "0, 1 or auto", "`auto`",
                        "NUMA placement (\"Devices and NUMA nodes\" below): `auto` on hosts with "
                        "more than one node, `0` off, `1` also on a one-node host; new pools only"},
    [CLPIN_OPT_ROUND_MAX] = {"CLPIN_ROUND_MAX", KIND_SIZE, 0, SIZE_MAX, true,
                             "a size such as 64M or 1G (suffixes K, M, G, T), or unlimited",
                             "`64M`",
                             "requests up to this size get power-of-two blocks, larger ones blocks "
                             "of at most max(request x 1.125, request + 2 MiB) (\"Blocks\" above; "
                             "`unlimited`: always powers of two)"},
    [CLPIN_OPT_STREAM_MIN] =
        {"CLPIN_STREAM_MIN", KIND_SIZE, 0, SIZE_MAX, true,
         "a size such as 16M or 64M (suffixes K, M, G, T), or unlimited", "`16M`",
         "staged rect and image transfers of at least this size move the rows with non-temporal "
         "(streaming) stores, which do not read the destination's lines first and leave them out "
         "of the cache: reads into the caller's memory (`clpin_read_rect`, `clpin_read_image`), "
         "writes into the pinned staging block; smaller transfers use `memcpy`, whose destination "
         "may stay cached (`unlimited`: never stream; "
         "[STAGING.md](STAGING.md#rect-and-image-transfers))"},
    [CLPIN_OPT_TRANSFER_THREADS] =
        {"CLPIN_TRANSFER_THREADS", KIND_COUNT, 1, 256, false, "a whole number from 1 to 256",
         "`16`",
         "the most copy threads one staged transfer uses at once (and the most parts one copy is "
         "split into), never more than `CLPIN_THREADS`: several transfers at once take up to this "
         "many threads each from the budget, one transfer no more "
         "([STAGING.md](STAGING.md#copy-threads-one-budget-for-the-process))"},
};

/* From the H100 sweep (docs/BENCHMARKS.md, "Choosing CLPIN_CHUNK and
 * CLPIN_THREADS"): 8 MiB chunks and about three quarters of the cores were
 * best for large pageable transfers; 4 MiB with 8 threads missed every
 * pipelined target. */
#define DEFAULT_CHUNK ((size_t)8 << 20)
/* Below 2 MiB staging does not reliably beat a plain transfer on the H100
 * (the size sweep, clpin-bench --case sweep: writes of 1 MiB staged ran at
 * 0.91-0.98x plain, of 4 MiB at 1.08x; today's sweep is in
 * docs/BENCHMARKS.md, "Size sweep"): the host copy and the extra commands
 * cost about what pageable DMA loses. */
#define DEFAULT_STAGE_MIN ((size_t)2 << 20)
/* Writes pay later than reads: on the H100 staged writes of 2-8 MiB ran at
 * 0.72-1.7x plain from one machine session to the next (0.74-0.88 in the
 * latest, with or without cutting them into pieces), of 16 MiB at 1.07x
 * and more in every run (docs/benchmarks/HISTORY.md,
 * "engine, registration, layer"). */
#define DEFAULT_STAGE_MIN_H2D ((size_t)16 << 20)
/* CLPIN_THREADS is the process's copy-thread budget, shared in turn by
 * every pool, device and direction (copythreads.c); one transfer copies with
 * at most CLPIN_TRANSFER_THREADS of them at once, and copy threads start (and
 * wake) only as the transfers running need them. Four GPUs' staged
 * transfers at once wanted more than 16 threads in all on the 64-core 4x
 * H100/H200 hosts (D2H 0.77 -> 0.99 of the host's bound, duplex 0.85 ->
 * 0.91), while one transfer ran no faster on 24 threads than on 16 (2x
 * H200, 32 cores: 43.1 against 45.5 GB/s H2D): so the budget is three
 * quarters of the cores and one transfer's share 16 (docs/BENCHMARKS.md,
 * "Several GPUs"). */
#define DEFAULT_MAX_THREADS 64
#define DEFAULT_TRANSFER_THREADS 16
/* Below this the OpenCL layer leaves a transfer to the driver: from 1 MiB up
 * already-pinned and pipelined paths beat a plain transfer
 * (docs/BENCHMARKS.md, "Size sweep"). */
#define DEFAULT_LAYER_MIN ((size_t)1 << 20)

/* Above this, blocks are sized to the request (docs/DESIGN.md, "Topology and
 * footprint"): power-of-two rounding of large requests pinned up to twice
 * what they asked. */
#define DEFAULT_ROUND_MAX ((size_t)64 << 20)

/* Staged rect and image reads of at least this many bytes scatter their
 * rows with streaming stores (streamcopy.c): on the 2-core container's
 * 32 MiB L3, rows by memcpy were faster at 8 MiB (the destination stays in
 * the cache) and streaming faster at 32 MiB (docs/BENCHMARKS.md, "Rect and
 * image transfers"). */
#define DEFAULT_STREAM_MIN ((size_t)16 << 20)

/* Off: it costs pinned memory. A debug aid (docs/API.md, "Errors"). */
#define DEFAULT_QUARANTINE 0

static _Atomic size_t values[CLPIN_OPT__COUNT];
static pthread_once_t loaded = PTHREAD_ONCE_INIT;
/* Set once load() has run: lets the hot path skip pthread_once. */
static atomic_bool ready;

const char *clpin__format_size(size_t v, char *buf, size_t len) {
  static const char suffix[] = "KMGT";
  if (v == SIZE_MAX) {
    snprintf(buf, len, "unlimited");
    return buf;
  }
  int i = -1;
  while (i < 3 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    i++;
  }
  if (i < 0)
    snprintf(buf, len, "%zu", v);
  else
    snprintf(buf, len, "%zu%c", v, suffix[i]);
  return buf;
}

/* The text of an option's value as a user would write it. */
static const char *format_value(clpin_option opt, size_t v, char *buf, size_t len) {
  const option_spec *s = &specs[opt];
  if (s->kind == KIND_TRI && v == CLPIN_PINNED_AUTO)
    snprintf(buf, len, "auto");
  else if (s->kind == KIND_SIZE && (v != SIZE_MAX || s->unlimited))
    clpin__format_size(v, buf, len);
  else
    snprintf(buf, len, "%zu", v);
  return buf;
}

/* Parse text for option s. On failure *why says what is wrong. */
static bool parse_value(const option_spec *s, const char *text, size_t *out, const char **why) {
  size_t v;
  if (s->kind == KIND_TRI && !strcasecmp(text, "auto")) {
    *out = CLPIN_PINNED_AUTO;
    return true;
  }
  if (s->unlimited && (!strcasecmp(text, "unlimited") || !strcasecmp(text, "none"))) {
    *out = SIZE_MAX;
    return true;
  }
  if (s->kind == KIND_SIZE) {
    *why = clpin__size_option(text, s->min, s->max, out);
    return !*why;
  }
  if (!clpin__parse_size(text, &v)) {
    *why = "not a valid value";
    return false;
  }
  /* Counts take no suffix. */
  for (const char *p = text; *p; p++)
    if (!isdigit((unsigned char)*p) && !isspace((unsigned char)*p)) {
      *why = "a suffix is not allowed here";
      return false;
    }
  if (v < s->min) {
    *why = "out of range";
    return false;
  }
  if (v > s->max) {
    *why = "out of range";
    return false;
  }
  *out = v;
  return true;
}

static size_t default_value(clpin_option opt) {
  switch (opt) {
  case CLPIN_OPT_PINNED: return CLPIN_PINNED_AUTO;
  case CLPIN_OPT_MAX_CACHED: return SIZE_MAX;
  case CLPIN_OPT_CHUNK: return DEFAULT_CHUNK;
  case CLPIN_OPT_STAGE_MIN: return DEFAULT_STAGE_MIN;
  case CLPIN_OPT_STAGE_MIN_H2D: return DEFAULT_STAGE_MIN_H2D;
  case CLPIN_OPT_THREADS: {
    long n = sysconf(_SC_NPROCESSORS_ONLN) * 3 / 4;
    return n < 1 ? 1 : n > DEFAULT_MAX_THREADS ? DEFAULT_MAX_THREADS : (size_t)n;
  }
  case CLPIN_OPT_DEBUG: return 0;
  case CLPIN_OPT_LAYER_MIN: return DEFAULT_LAYER_MIN;
  case CLPIN_OPT_QUARANTINE: return DEFAULT_QUARANTINE;
  case CLPIN_OPT_NUMA: return CLPIN_NUMA_AUTO;
  case CLPIN_OPT_ROUND_MAX: return DEFAULT_ROUND_MAX;
  case CLPIN_OPT_STREAM_MIN: return DEFAULT_STREAM_MIN;
  case CLPIN_OPT_TRANSFER_THREADS: return DEFAULT_TRANSFER_THREADS;
  default: return 0;
  }
}

/* Defaults a host program set before the first use (clpin__opt_default). */
static size_t default_set[CLPIN_OPT__COUNT];
static bool default_is_set[CLPIN_OPT__COUNT];

static void load(void) {
  for (int i = 0; i < CLPIN_OPT__COUNT; i++) {
    size_t v = default_is_set[i] ? default_set[i] : default_value((clpin_option)i);
    const char *text = getenv(specs[i].env);
    if (text && *text) {
      size_t parsed;
      const char *why = "not a valid value";
      if (parse_value(&specs[i], text, &parsed, &why)) {
        v = parsed;
      } else {
        char def[32];
        fprintf(stderr, "clpin: ignoring %s=\"%s\": %s; valid: %s; using the default %s\n",
                specs[i].env, text, why, specs[i].valid,
                format_value((clpin_option)i, v, def, sizeof def));
      }
    }
    atomic_store(&values[i], v);
  }
  atomic_store_explicit(&ready, true, memory_order_release);
  if (values[CLPIN_OPT_DEBUG]) {
    /* One line with every option as it will be used, sizes as written. */
    char line[768] = "options:";
    size_t used = strlen(line);
    for (int i = 0; i < CLPIN_OPT__COUNT && used < sizeof line; i++) {
      char v[32];
      used += (size_t)snprintf(line + used, sizeof line - used, " %s=%s", specs[i].env,
                               format_value((clpin_option)i, values[i], v, sizeof v));
    }
    clpin__log("%s", line);
  }
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
  CLPIN__CHECK_FMT((unsigned)opt >= CLPIN_OPT__COUNT, CLPIN_ERR_INVALID_OPTION,
                   "opt %d is not a clpin_option (there are %d)", (int)opt, (int)CLPIN_OPT__COUNT);
  CLPIN__CHECK_FMT(value < specs[opt].min || value > specs[opt].max, CLPIN_ERR_INVALID_OPTION,
                   "value %zu is out of range for %s: it takes %zu to %zu", value, specs[opt].env,
                   specs[opt].min, specs[opt].max);
  atomic_store(&values[opt], value);
  return CL_SUCCESS;
}

bool clpin__debug(void) { return clpin__opt(CLPIN_OPT_DEBUG) != 0; }

/* CLPIN_DEBUG=1's memory of the lines written: their hashes (FNV-1a, 0 for
 * an empty slot), open addressing. Once full, new lines are written without
 * being remembered. Only debug runs take the lock. */
#define SEEN_SLOTS 4096
static struct {
  pthread_mutex_t mu;
  uint64_t hash[SEEN_SLOTS];
  size_t used;
  uint64_t repeats; /* lines not written again */
  size_t repeated;  /* distinct lines among them */
  bool counted[SEEN_SLOTS];
} seen = {.mu = PTHREAD_MUTEX_INITIALIZER};

bool clpin__log_new(const char *line) {
  if (clpin__opt(CLPIN_OPT_DEBUG) >= 2)
    return true;
  uint64_t h = 1469598103934665603u;
  for (const unsigned char *p = (const unsigned char *)line; *p; p++)
    h = (h ^ *p) * 1099511628211u;
  h += !h;
  bool fresh = true;
  pthread_mutex_lock(&seen.mu);
  for (size_t i = h % SEEN_SLOTS, n = 0; n < SEEN_SLOTS; i = (i + 1) % SEEN_SLOTS, n++) {
    if (seen.hash[i] == h) {
      fresh = false;
      seen.repeats++;
      seen.repeated += !seen.counted[i];
      seen.counted[i] = true;
      break;
    }
    if (!seen.hash[i]) {
      if (seen.used < SEEN_SLOTS / 2) { /* past half full, probes grow long */
        seen.hash[i] = h;
        seen.used++;
      }
      break;
    }
  }
  pthread_mutex_unlock(&seen.mu);
  return fresh;
}

/* At exit, what CLPIN_DEBUG=1 left out, so a reader knows lines repeated. */
__attribute__((destructor)) static void say_repeats(void) {
  if (clpin__forked())
    return;
  pthread_mutex_lock(&seen.mu);
  uint64_t repeats = seen.repeats;
  size_t repeated = seen.repeated;
  pthread_mutex_unlock(&seen.mu);
  if (repeats)
    fprintf(stderr,
            "clpin: %llu repeats of %zu debug lines above were not written again (CLPIN_DEBUG=2 "
            "writes every one)\n",
            (unsigned long long)repeats, repeated);
}

static void log_line(const char *fmt, va_list ap) {
  char line[520] = "clpin: ";
  vsnprintf(line + 7, sizeof line - 7, fmt, ap);
  if (!clpin__log_new(line))
    return;
  /* One write per line so lines from several threads do not interleave. */
  fprintf(stderr, "%s\n", line);
}

void clpin__log(const char *fmt, ...) {
  if (!clpin__debug())
    return;
  va_list ap;
  va_start(ap, fmt);
  log_line(fmt, ap);
  va_end(ap);
}

void clpin__log_event(const char *fmt, ...) {
  if (clpin__opt(CLPIN_OPT_DEBUG) < 2)
    return;
  va_list ap;
  va_start(ap, fmt);
  log_line(fmt, ap);
  va_end(ap);
}

void clpin__opt_default(clpin_option opt, size_t value) {
  if ((unsigned)opt < CLPIN_OPT__COUNT && !atomic_load(&ready)) {
    default_set[opt] = value;
    default_is_set[opt] = true;
  }
}
