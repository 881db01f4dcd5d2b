/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness: the input is a program of clpin API calls, valid and
 * invalid, run against one pool and checked against a model of what the pool
 * holds.
 *
 * The first input byte sets the chunk size and CLPIN_PINNED_H2D; then each
 * step picks an operation and its arguments from the next bytes (missing
 * bytes read as 0). The model keeps the blocks and host
 * allocations the program owns, the blocks released with a still-pending
 * user event, the handles it released (for double releases) and the handles
 * of released pools; after every step the pool's stats are compared with it:
 * blocks and bytes in use and in flight and bytes requested exactly, the
 * cache per bucket while the model knows it (hit or miss predicted for each
 * acquire), the invariant cached + in_use + in_flight == reserved, and for
 * every call that fails, an identical snapshot. A mismatch aborts, which
 * libFuzzer reports as a crash with the input that caused it.
 *
 * One OpenCL context (the first platform, or CLPIN_TEST_PLATFORM) is created
 * on the first input and kept. Every input ends by giving everything back
 * (completing events, releasing, trimming, unlimited cap), so inputs start
 * from an empty pool.
 *
 * Built with clang -fsanitize=fuzzer,address,undefined as fuzz_api, and
 * with any compiler as fuzz_replay (tests/fuzz/replay_main.c), which CTest
 * runs over tests/fuzz/regressions and tests/fuzz/corpus. */
#include "clpin.h"
#include "testutil.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LIVE 24
#define MAX_PEND 12
#define MAX_RELEASED 32
#define MAX_STALE 16
#define MAX_STEPS 200
#define DEV_SIZE ((size_t)64 * 1024)

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_api: step %d (op %d): check failed: %s: ", step_no, op_no, #cond);     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* ---- the OpenCL context, made once ------------------------------------- */

static cl_context ctx;
static cl_command_queue queue;
static cl_device_id device;
static cl_mem dev; /* DEV_SIZE bytes, target of the transfers */
static size_t max_alloc;
static bool unified; /* CL_DEVICE_HOST_UNIFIED_MEMORY */
static int step_no, op_no;

static void open_cl(void) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, ps, &np) != CL_SUCCESS || np == 0) {
    fprintf(stderr, "fuzz_api: no OpenCL platform\n");
    abort();
  }
  if (np > 16)
    np = 16;
  const char *want = getenv("CLPIN_TEST_PLATFORM");
  cl_platform_id plat = NULL;
  for (cl_uint i = 0; i < np && !plat; i++) {
    char name[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (!want || !*want || strstr(name, want))
      plat = ps[i];
  }
  cl_int err =
      plat ? clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &device, NULL) : CL_INVALID_PLATFORM;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
  if (err == CL_SUCCESS)
    ctx = clCreateContext(props, 1, &device, NULL, NULL, &err);
  if (err == CL_SUCCESS)
    queue = clCreateCommandQueue(ctx, device, 0, &err);
  if (err == CL_SUCCESS)
    dev = clCreateBuffer(ctx, CL_MEM_READ_WRITE, DEV_SIZE, NULL, &err);
  cl_ulong m = 0;
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof m, &m, NULL);
  cl_bool um = CL_FALSE;
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof um, &um, NULL);
  unified = um == CL_TRUE;
  if (err != CL_SUCCESS) {
    fprintf(stderr, "fuzz_api: cannot open OpenCL: %s\n", clpin_strerror(err));
    abort();
  }
  max_alloc = m > SIZE_MAX ? SIZE_MAX : (size_t)m;
}

/* ---- input reader ------------------------------------------------------- */

typedef struct {
  const uint8_t *p;
  size_t n;
} reader;

static unsigned u8(reader *r) {
  if (!r->n)
    return 0;
  r->n--;
  return *r->p++;
}
static unsigned u16(reader *r) { return u8(r) | u8(r) << 8; }
static uint32_t u32(reader *r) { return (uint32_t)u16(r) | (uint32_t)u16(r) << 16; }

/* ---- the model ---------------------------------------------------------- */

typedef struct {
  clpin_block *b; /* NULL for a host allocation until looked up */
  void *host;
  size_t req, cap;
  bool host_alloc;
  unsigned char seed;
} live_t;

typedef struct {
  cl_event ev;
  size_t cap;
  unsigned bucket;
} pend_t;

static clpin_pool *pool;
static live_t live[MAX_LIVE];
static int nlive;
static pend_t pend[MAX_PEND];
static int npend;
static clpin_block *released[MAX_RELEASED]; /* released by us, not live */
static int nreleased;
static void *freed_hosts[MAX_RELEASED];
static int nfreed;
/* Handles that outlived their pool. */
static clpin_pool *stale_pools[MAX_STALE];
static clpin_block *stale_blocks[MAX_STALE];
static void *stale_hosts[MAX_STALE];
static int nstale_pools, nstale_blocks, nstale_hosts;

static size_t cached_in[64]; /* cached blocks per bucket, when known */
static bool cache_known;
static size_t limit;
static clpin_stats last;

static _Alignas(64) unsigned char fake[512];

static unsigned bucket_of(size_t n) {
  if (n < CLPIN_MIN_BLOCK)
    n = CLPIN_MIN_BLOCK;
  unsigned b = 0;
  while (((size_t)1 << b) < n)
    b++;
  return b;
}

static size_t capacity_for(size_t n) {
  size_t cap = (size_t)1 << bucket_of(n);
  return cap > max_alloc ? max_alloc : cap;
}

static clpin_stats snap_of(clpin_pool *p, cl_int *err) {
  clpin_stats s;
  *err = test_stats_get(p, &s);
  return s;
}

static clpin_stats snap(void) {
  cl_int err;
  clpin_stats s = snap_of(pool, &err);
  CHECK(err == CL_SUCCESS, "clpin_pool_stats -> %d", err);
  return s;
}

static void same_stats(const clpin_stats *a, const clpin_stats *b, const char *what) {
  CHECK(memcmp(a, b, sizeof *a) == 0,
        "%s changed the stats (in_use %zu->%zu cached %zu->%zu reserved %zu->%zu hits "
        "%llu->%llu misses %llu->%llu)",
        what, a->blocks_in_use, b->blocks_in_use, a->blocks_cached, b->blocks_cached,
        a->bytes_reserved, b->bytes_reserved, (unsigned long long)a->hits,
        (unsigned long long)b->hits, (unsigned long long)a->misses, (unsigned long long)b->misses);
}

/* What must hold after every step. */
static void check_model(const clpin_stats *s) {
  size_t in_use = 0, bytes = 0, req = 0, fl = 0, flb = 0;
  for (int i = 0; i < nlive; i++) {
    in_use++;
    bytes += live[i].cap;
    req += live[i].req;
  }
  for (int i = 0; i < npend; i++) {
    fl++;
    flb += pend[i].cap;
  }
  CHECK(s->blocks_in_use == in_use && s->bytes_in_use == bytes, "in use %zu/%zu, model %zu/%zu",
        s->blocks_in_use, s->bytes_in_use, in_use, bytes);
  CHECK(s->bytes_requested == req, "bytes_requested %zu, model %zu", s->bytes_requested, req);
  CHECK(s->blocks_in_flight == fl && s->bytes_in_flight == flb, "in flight %zu/%zu, model %zu/%zu",
        s->blocks_in_flight, s->bytes_in_flight, fl, flb);
  char why[256];
  CHECK(!test_stats_broken(s, why, sizeof why), "pool invariant broken: %s", why);
  CHECK(s->hits >= last.hits && s->misses >= last.misses && s->driver_frees >= last.driver_frees,
        "a cumulative counter went down");
  if (cache_known) {
    size_t n = 0, nb = 0;
    for (unsigned b = 0; b < 64; b++) {
      n += cached_in[b];
      nb += cached_in[b] * capacity_for((size_t)1 << b);
    }
    CHECK(s->blocks_cached == n && s->bytes_cached == nb, "cached %zu/%zu, model %zu/%zu",
          s->blocks_cached, s->bytes_cached, n, nb);
  }
}

static bool is_live_handle(const clpin_block *b) {
  for (int i = 0; i < nlive; i++)
    if (live[i].b == b)
      return true;
  return false;
}

/* Whether p lies in the capacity of a block the program holds. */
static bool in_live_range(const void *p) {
  for (int i = 0; i < nlive; i++)
    if ((uintptr_t)p >= (uintptr_t)live[i].host &&
        (uintptr_t)p < (uintptr_t)live[i].host + live[i].cap)
      return true;
  return false;
}

static void remember_released(clpin_block *b) {
  if (!b)
    return;
  if (nreleased == MAX_RELEASED)
    memmove(released, released + 1, (MAX_RELEASED - 1) * sizeof *released), nreleased--;
  released[nreleased++] = b;
}

static void remember_freed(void *p) {
  if (nfreed == MAX_RELEASED)
    memmove(freed_hosts, freed_hosts + 1, (MAX_RELEASED - 1) * sizeof *freed_hosts), nfreed--;
  freed_hosts[nfreed++] = p;
}

/* A pattern at both ends of the requested bytes of a block we hold. */
static void mark(live_t *l) {
  unsigned char *h = l->host;
  size_t k = l->req < 64 ? l->req : 64;
  for (size_t i = 0; i < k; i++)
    h[i] = (unsigned char)(l->seed + i);
  for (size_t i = 0; i < k; i++)
    h[l->req - 1 - i] = (unsigned char)(l->seed ^ i);
}

static void check_mark(const live_t *l) {
  const unsigned char *h = l->host;
  size_t k = l->req < 64 ? l->req : 64;
  /* The ends overlap for small blocks: check the tail pattern, then the head
   * where the tail did not overwrite it. */
  for (size_t i = 0; i < k; i++)
    CHECK(h[l->req - 1 - i] == (unsigned char)(l->seed ^ i), "block data changed at %zu",
          l->req - 1 - i);
  for (size_t i = 0; i < k && i < l->req - k; i++)
    CHECK(h[i] == (unsigned char)(l->seed + i), "block data changed at %zu", i);
}

/* Wait until the pool's in-flight count matches the model (completion
 * callbacks may run on a driver thread). */
static clpin_stats settle(void) {
  clpin_stats s = snap();
  for (int i = 0; i < 4000 && s.blocks_in_flight != (size_t)npend; i++) {
    struct timespec ts = {0, 500 * 1000};
    nanosleep(&ts, NULL);
    s = snap();
  }
  return s;
}

/* ---- operations --------------------------------------------------------- */

static size_t valid_size(reader *r) {
  switch (u8(r) % 5) {
  case 0: return 1 + u8(r);
  case 1: return 1 + u16(r);
  case 2: return (size_t)1 << (u8(r) % 21);
  case 3: return ((size_t)1 << (u8(r) % 20)) + 1;
  default: return 4096 + u16(r) % 8192;
  }
}

static size_t invalid_size(reader *r) {
  switch (u8(r) % 5) {
  case 0: return 0;
  case 1: return SIZE_MAX;
  case 2: return max_alloc + 1 + u16(r);
  case 3: return (SIZE_MAX >> 1) + 2;
  default: return SIZE_MAX - u16(r);
  }
}

/* Account for a successful acquire of n bytes that gave cap bytes. */
static void expect_acquired(const clpin_stats *s, size_t n) {
  unsigned b = bucket_of(n);
  CHECK(s->hits + s->misses == last.hits + last.misses + 1, "one acquire, hits+misses %llu->%llu",
        (unsigned long long)(last.hits + last.misses), (unsigned long long)(s->hits + s->misses));
  if (cache_known) {
    bool hit = cached_in[b] > 0;
    CHECK(s->hits == last.hits + (hit ? 1 : 0), "acquire of %zu: expected a %s", n,
          hit ? "hit" : "miss");
    if (hit)
      cached_in[b]--;
  }
  if (s->misses > last.misses)
    CHECK(s->driver_allocs == last.driver_allocs + 1 + (s->oom_retries - last.oom_retries),
          "a miss must create one buffer");
  else
    CHECK(s->driver_allocs == last.driver_allocs, "a hit must not create a buffer");
}

static void op_acquire(reader *r) {
  if (nlive == MAX_LIVE)
    return;
  size_t n = valid_size(r);
  bool as_host = u8(r) & 1;
  live_t l = {NULL, NULL, n, capacity_for(n), as_host, (unsigned char)u8(r)};
  if (as_host) {
    l.host = clpin_host_alloc(pool, n);
    CHECK(l.host != NULL, "clpin_host_alloc(%zu) failed", n);
    size_t off = 1;
    l.b = clpin_pool_find(pool, l.host, n, &off);
    CHECK(l.b && off == 0, "clpin_pool_find of a fresh host allocation");
  } else {
    cl_int err = clpin_acquire(pool, n, &l.b);
    CHECK(err == CL_SUCCESS, "clpin_acquire(%zu) -> %d", n, err);
    l.host = clpin_block_host(l.b);
    CHECK(l.host != NULL, "no host pointer");
  }
  CHECK(clpin_block_size(l.b) == l.cap, "capacity %zu for %zu, want %zu", clpin_block_size(l.b), n,
        l.cap);
  CHECK(clpin_block_buffer(l.b) != NULL, "no buffer");
  CHECK(!is_live_handle(l.b), "a block handed out twice");
  CHECK(!in_live_range(l.host), "host memory overlaps a block in use");
  clpin_stats s = snap();
  expect_acquired(&s, n);
  live[nlive++] = l;
  mark(&live[nlive - 1]);
  last = s;
}

static void op_acquire_bad(reader *r) {
  clpin_block *b = (clpin_block *)fake;
  cl_int want = CLPIN_ERR_INVALID_SIZE, err;
  size_t n = invalid_size(r);
  switch (u8(r) % 4) {
  case 0: err = clpin_acquire(NULL, n ? n : 1, &b), want = CLPIN_ERR_INVALID_ARGUMENT; break;
  case 1: err = clpin_acquire(pool, 1 + u8(r), NULL), want = CLPIN_ERR_INVALID_ARGUMENT; break;
  case 2: {
    void *p = clpin_host_alloc(pool, n);
    CHECK(p == NULL, "clpin_host_alloc(%zu) succeeded", n);
    err = want;
    break;
  }
  default: err = clpin_acquire(pool, n, &b); break;
  }
  CHECK(err == want, "bad acquire of %zu -> %d, want %d", n, err, want);
  CHECK(b == (clpin_block *)fake, "out-argument written on failure");
  clpin_stats s = snap();
  same_stats(&last, &s, "a failed acquire");
}

static void take_live(int i, live_t *out) {
  *out = live[i];
  check_mark(out);
  live[i] = live[--nlive];
}

/* The stats after a plain release (or free), or after a pending release's
 * event completed and the pool noticed: the block is cached if it fits
 * under the cap, else freed. */
static void expect_settled(const clpin_stats *s, size_t cap, unsigned bucket, const char *what) {
  bool fits = limit == SIZE_MAX || last.bytes_cached + cap <= limit;
  if (fits) {
    CHECK(s->blocks_cached == last.blocks_cached + 1 &&
              s->bytes_cached == last.bytes_cached + cap && s->driver_frees == last.driver_frees,
          "%s of %zu B with %zu B cached under a cap of %zu: must be cached", what, cap,
          last.bytes_cached, limit);
    if (cache_known)
      cached_in[bucket]++;
  } else {
    CHECK(s->blocks_cached == last.blocks_cached && s->driver_frees == last.driver_frees + 1,
          "%s of %zu B with %zu B cached under a cap of %zu: must be freed", what, cap,
          last.bytes_cached, limit);
  }
  CHECK(limit == SIZE_MAX || s->bytes_cached <= limit, "cached %zu over the cap %zu",
        s->bytes_cached, limit);
}

static void op_release(reader *r) {
  if (!nlive)
    return;
  int i = (int)(u8(r) % (unsigned)nlive);
  live_t l;
  take_live(i, &l);
  cl_int err;
  if (l.host_alloc && (u8(r) & 1)) {
    err = clpin_host_free(l.host);
    remember_freed(l.host);
  } else {
    err = clpin_release(l.b, NULL);
  }
  CHECK(err == CL_SUCCESS, "release -> %d", err);
  remember_released(l.b);
  clpin_stats s = snap();
  expect_settled(&s, l.cap, bucket_of(l.req), "a release");
  last = s;
}

static void op_release_pending(reader *r) {
  if (!nlive || npend == MAX_PEND)
    return;
  int i = (int)(u8(r) % (unsigned)nlive);
  live_t l;
  take_live(i, &l);
  cl_int err;
  cl_event ev = clCreateUserEvent(ctx, &err);
  CHECK(err == CL_SUCCESS, "clCreateUserEvent -> %d", err);
  err = clpin_release(l.b, ev);
  CHECK(err == CL_SUCCESS, "clpin_release(pending) -> %d", err);
  pend[npend++] = (pend_t){ev, l.cap, bucket_of(l.req)};
  remember_released(l.b);
  clpin_stats s = snap();
  CHECK(s.blocks_cached == last.blocks_cached && s.driver_frees == last.driver_frees,
        "a pending release touched the cache");
  last = s;
}

static void complete_pending(int i, cl_int status) {
  pend_t p = pend[i];
  pend[i] = pend[--npend];
  cl_int err = clSetUserEventStatus(p.ev, status);
  CHECK(err == CL_SUCCESS, "clSetUserEventStatus -> %d", err);
  clReleaseEvent(p.ev);
  /* The pool lands the block when it next looks (the stats call does). */
  clpin_stats s = settle();
  expect_settled(&s, p.cap, p.bucket, "a completion");
  last = s;
}

static void op_complete(reader *r) {
  if (!npend)
    return;
  int i = (int)(u8(r) % (unsigned)npend);
  complete_pending(i, (u8(r) & 3) == 0 ? CL_INVALID_VALUE : CL_COMPLETE);
}

static void op_release_bad(reader *r) {
  cl_int err, want;
  switch (u8(r) % 4) {
  case 0: { /* double release */
    int k = -1;
    for (int tries = 0; tries < 4 && nreleased; tries++) {
      int j = (int)(u8(r) % (unsigned)nreleased);
      if (!is_live_handle(released[j])) {
        k = j;
        break;
      }
    }
    if (k < 0)
      return;
    if (u8(r) & 1) {
      cl_event ev = clCreateUserEvent(ctx, &err);
      CHECK(err == CL_SUCCESS, "clCreateUserEvent -> %d", err);
      err = clpin_release(released[k], ev);
      clSetUserEventStatus(ev, CL_COMPLETE);
      clReleaseEvent(ev);
    } else {
      err = clpin_release(released[k], NULL);
    }
    want = CLPIN_ERR_DOUBLE_RELEASE;
    break;
  }
  case 1: { /* garbage that is not a block: zeros or a pseudo-random stream */
    uint64_t x = u8(r);
    for (size_t i = 0; i < sizeof fake; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      fake[i] = x ? (unsigned char)(x >> 56) : 0;
    }
    err = clpin_release((clpin_block *)fake, NULL);
    want = CLPIN_ERR_INVALID_BLOCK;
    CHECK(clpin_block_host((clpin_block *)fake) == NULL, "host pointer of a fake block");
    CHECK(clpin_block_size((clpin_block *)fake) == 0, "size of a fake block");
    break;
  }
  case 2:
    memset(fake, 0, sizeof fake);
    err = clpin_release((clpin_block *)fake, NULL);
    want = CLPIN_ERR_INVALID_BLOCK;
    break;
  default:
    err = clpin_release(NULL, NULL);
    want = CL_SUCCESS;
    break;
  }
  CHECK(err == want, "bad release -> %d, want %d", err, want);
  clpin_stats s = snap();
  same_stats(&last, &s, "a bad release");
}

static void op_host_free_bad(reader *r) {
  void *p;
  int on_stack = 0;
  void *heap = NULL;
  switch (u8(r) % 5) {
  case 0: /* freed before */
    if (!nfreed)
      return;
    p = freed_hosts[u8(r) % (unsigned)nfreed];
    for (int i = 0; i < nlive; i++)
      if (live[i].host_alloc && live[i].host == p)
        return; /* the address came back for a new allocation */
    break;
  case 1: { /* interior pointer of a live block (host allocation or not) */
    if (!nlive)
      return;
    const live_t *l = &live[u8(r) % (unsigned)nlive];
    p = (char *)l->host + (l->host_alloc ? 1 + u16(r) % (l->cap - 1) : u16(r) % l->cap);
    break;
  }
  case 2: p = &on_stack; break;
  case 3:
    heap = malloc(64);
    p = heap;
    break;
  default: p = fake + u8(r) % 64; break;
  }
  cl_int err = clpin_host_free(p);
  free(heap);
  /* malloc may hand out the address of memory a released pool freed while
   * clpin_host_alloc memory of it was still out: that answers
   * CLPIN_ERR_POOL_RELEASED (once), as its first free would. */
  CHECK(err == CLPIN_ERR_FOREIGN_POINTER || (heap && err == CLPIN_ERR_POOL_RELEASED),
        "clpin_host_free(foreign %p) -> %d", p, err);
  clpin_stats s = snap();
  same_stats(&last, &s, "a foreign host_free");
}

static void op_find(reader *r) {
  size_t off = 777;
  clpin_block *f;
  if (nlive && (u8(r) & 1)) {
    const live_t *l = &live[u8(r) % (unsigned)nlive];
    size_t o = u16(r) % l->cap;
    size_t n = u8(r) & 1 ? 1 + u16(r) % (l->cap - o) : l->cap - o + 1 + u8(r);
    f = clpin_pool_find(pool, (char *)l->host + o, n, &off);
    if (o + n <= l->cap) {
      CHECK(f == l->b && off == o, "find inside a live block: %p off %zu, want %p off %zu",
            (void *)f, off, (void *)l->b, o);
    } else {
      CHECK(f == NULL && off == 777, "find of a range past a block's end found %p", (void *)f);
    }
  } else {
    int x = 0;
    switch (u8(r) % 4) {
    case 0: f = clpin_pool_find(pool, &x, sizeof x, &off); break;
    case 1: f = clpin_pool_find(pool, NULL, 1, &off); break;
    case 2: f = clpin_pool_find(NULL, &x, 1, &off); break;
    default:
      if (!nfreed || in_live_range(freed_hosts[0]))
        return;
      f = clpin_pool_find(pool, freed_hosts[0], 1, &off);
      break;
    }
    CHECK(f == NULL && off == 777, "find of a pointer outside every live block found %p",
          (void *)f);
  }
  clpin_stats s = snap();
  same_stats(&last, &s, "clpin_pool_find");
}

static void op_trim(void) {
  cl_int err = clpin_pool_trim(pool);
  CHECK(err == CL_SUCCESS, "trim -> %d", err);
  clpin_stats s = snap();
  CHECK(s.blocks_cached == 0 && s.bytes_cached == 0, "trim left %zu cached", s.blocks_cached);
  CHECK(s.driver_frees == last.driver_frees + last.blocks_cached, "trim freed %llu, want %zu",
        (unsigned long long)(s.driver_frees - last.driver_frees), last.blocks_cached);
  memset(cached_in, 0, sizeof cached_in);
  cache_known = true;
  last = s;
}

static void op_set_limit(reader *r) {
  static const size_t limits[] = {0, 4096, 65536, (size_t)1 << 20, (size_t)8 << 20, SIZE_MAX};
  unsigned k = u8(r);
  size_t lim = k % 8 < 6 ? limits[k % 8] : (size_t)u32(r);
  cl_int err = clpin_pool_set_limit(pool, lim);
  CHECK(err == CL_SUCCESS, "set_limit -> %d", err);
  limit = lim;
  clpin_stats s = snap();
  CHECK(s.bytes_cached <= limit, "cached %zu over the new cap %zu", s.bytes_cached, limit);
  if (s.driver_frees != last.driver_frees)
    cache_known = false; /* which idle blocks went is the pool's choice */
  last = s;
}

static void op_stats_bad(reader *r) {
  clpin_stats s;
  memset(&s, 0x5c, sizeof s);
  cl_int err;
  switch (u8(r) % 3) {
  case 0: err = clpin_pool_stats(pool, NULL); break;
  case 1:
    s.struct_size = u8(r) % sizeof(size_t) * 8;
    err = clpin_pool_stats(pool, &s);
    break;
  default:
    s.struct_size = sizeof s;
    err = clpin_pool_stats(NULL, &s);
    break;
  }
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "bad stats call -> %d", err);
  CHECK(s.hits == 0x5c5c5c5c5c5c5c5cull, "stats written on failure");
  CHECK(clpin_pool_trim(NULL) == CLPIN_ERR_INVALID_ARGUMENT, "trim(NULL)");
  CHECK(clpin_pool_set_limit(NULL, 0) == CLPIN_ERR_INVALID_ARGUMENT, "set_limit(NULL)");
  clpin_stats now = snap();
  same_stats(&last, &now, "bad stats/trim/limit calls");
}

static unsigned char xbuf[DEV_SIZE + 64], ybuf[DEV_SIZE + 64];

/* The path docs/STAGING.md says a transfer of n bytes takes, as the counter
 * it adds n to: 0 pinned direct, 1 unpinned, 2 staged, 3 pipelined. */
static int expected_path(bool host_in_block, unsigned flags, size_t n) {
  if (host_in_block)
    return 0;
  if (!(flags & CLPIN_PIN_MEMORY))
    return 1;
  if (unified && clpin_get_option(CLPIN_OPT_PINNED) == 0)
    return 1;
  return n <= clpin_get_option(CLPIN_OPT_CHUNK) ? 2 : 3;
}

static void expect_paths(const clpin_stats *s, int wpath, int rpath, size_t n) {
  uint64_t want[4] = {0, 0, 0, 0};
  want[wpath] += n;
  want[rpath] += n;
  uint64_t got[4] = {s->bytes_pinned_direct - last.bytes_pinned_direct,
                     s->bytes_unpinned - last.bytes_unpinned, s->bytes_staged - last.bytes_staged,
                     s->bytes_pipelined - last.bytes_pipelined};
  CHECK(s->fallbacks == last.fallbacks, "a transfer fell back without memory pressure");
  CHECK(!memcmp(want, got, sizeof want),
        "paths of a %zu B round trip (write path %d, read path %d): direct/unpinned/staged/"
        "pipelined moved by %llu/%llu/%llu/%llu",
        n, wpath, rpath, (unsigned long long)got[0], (unsigned long long)got[1],
        (unsigned long long)got[2], (unsigned long long)got[3]);
}

static void op_transfer(reader *r) {
  size_t off = u16(r) % DEV_SIZE;
  size_t n = 1 + u16(r) % (DEV_SIZE - off);
  unsigned flags = u8(r) & 3;
  unsigned char seed = (unsigned char)u8(r);
  /* From pageable memory, or from a block we hold (the already-pinned path). */
  unsigned char *src = xbuf + (u8(r) & 7), *dst = ybuf + (u8(r) & 7);
  live_t *l = NULL;
  if (nlive && (u8(r) & 1)) {
    l = &live[u8(r) % (unsigned)nlive];
    if (l->req < n)
      n = l->req;
    src = l->host;
  }
  if (l) {
    /* Define the block's bytes between its end marks (memory fresh from the
     * driver is uninitialised, which valgrind would report in the compare). */
    check_mark(l);
    size_t k = l->req < 64 ? l->req : 64;
    for (size_t i = k; i < n && i + k < l->req; i++)
      src[i] = (unsigned char)(seed + i * 7);
  } else {
    for (size_t i = 0; i < n; i++)
      src[i] = (unsigned char)(seed + i * 7);
  }
  unsigned char *expect = malloc(n);
  CHECK(expect != NULL, "malloc");
  memcpy(expect, src, n);
  cl_event e1 = NULL, e2 = NULL;
  cl_int err = clpin_write(queue, dev, off, src, n, flags, 0, NULL, &e1);
  CHECK(err == CL_SUCCESS, "clpin_write(%zu at %zu, flags %u) -> %d", n, off, flags, err);
  err = clpin_read(queue, dev, off, dst, n, flags, 1, &e1, &e2);
  CHECK(err == CL_SUCCESS, "clpin_read(%zu at %zu, flags %u) -> %d", n, off, flags, err);
  CHECK(clWaitForEvents(1, &e2) == CL_SUCCESS, "wait");
  clReleaseEvent(e1);
  clReleaseEvent(e2);
  CHECK(memcmp(dst, expect, n) == 0, "round trip of %zu bytes at %zu (flags %u) differs", n, off,
        flags);
  free(expect);
  if (l)
    check_mark(l);
  clpin_stats s = settle();
  expect_paths(&s, expected_path(l != NULL, flags, n), expected_path(false, flags, n), n);
  /* Staging used pool blocks of its own: the cache changed in ways the
   * model does not predict, but nothing may stay in use or in flight. */
  cache_known = false;
  last = s;
  check_model(&s);
}

static void op_transfer_bad(reader *r) {
  unsigned char *h = xbuf;
  cl_event ev = (cl_event)fake, ue = NULL;
  cl_int want, err;
  size_t off = 0, n = 16;
  unsigned flags = u8(r) & 3;
  cl_uint nw = 0;
  const cl_event *wl = NULL;
  cl_command_queue q = queue;
  cl_mem m = dev;
  switch (u8(r) % 7) {
  case 0:
    off = DEV_SIZE - u8(r) % 16;
    n = 17 + u8(r);
    want = CL_INVALID_VALUE;
    break;
  case 1:
    off = SIZE_MAX - u8(r);
    n = 1 + u8(r);
    want = CL_INVALID_VALUE;
    break;
  case 2:
    n = DEV_SIZE + 1 + u16(r);
    want = CL_INVALID_VALUE;
    break;
  case 3: /* a bit of no flag, or of the access family (CLPIN_READ, CLPIN_WRITE) */
    flags |= 4u << (u8(r) % 29);
    want = CLPIN_ERR_INVALID_ARGUMENT;
    break;
  case 4:
    nw = 1 + u8(r) % 4;
    want = CL_INVALID_EVENT_WAIT_LIST;
    break;
  case 5:
    ue = clCreateUserEvent(ctx, &err);
    CHECK(err == CL_SUCCESS, "clCreateUserEvent");
    wl = &ue;
    want = CL_INVALID_EVENT_WAIT_LIST;
    break;
  default:
    switch (u8(r) % 3) {
    case 0: q = NULL, want = CL_INVALID_COMMAND_QUEUE; break;
    case 1: m = NULL, want = CL_INVALID_MEM_OBJECT; break;
    default: h = NULL, want = CL_INVALID_VALUE; break;
    }
    break;
  }
  if (u8(r) & 1)
    err = clpin_write(q, m, off, h, n, flags, nw, wl, &ev);
  else
    err = clpin_read(q, m, off, h, n, flags, nw, wl, &ev);
  if (ue) {
    clSetUserEventStatus(ue, CL_COMPLETE);
    clReleaseEvent(ue);
  }
  CHECK(err == want, "bad transfer (off %zu n %zu flags %u nw %u) -> %d, want %d", off, n, flags,
        nw, err, want);
  CHECK(ev == (cl_event)fake, "event written on failure");
  clpin_stats s = snap();
  same_stats(&last, &s, "a bad transfer");
}

/* One tensor's life: created from host data or empty, then a few mirror and
 * transfer calls, each checked against the header's state table and against
 * the tensor's value (what its head holds), then released. Between ops the
 * pool's model holds: the mirror's block is back when the tensor is gone. */
static unsigned char tval[DEV_SIZE], tnew[DEV_SIZE];

static clpin_head next_head(bool host_side, clpin_head h, unsigned access) {
  bool rd = access & CLPIN_READ, wr = access & CLPIN_WRITE;
  if (host_side) {
    if (wr || h == CLPIN_HEAD_UNINITIALIZED || h == CLPIN_HEAD_HOST)
      return CLPIN_HEAD_HOST;
    return rd && h == CLPIN_HEAD_DEVICE ? CLPIN_HEAD_SYNCED : h;
  }
  if (wr || h == CLPIN_HEAD_UNINITIALIZED || h == CLPIN_HEAD_DEVICE)
    return CLPIN_HEAD_DEVICE;
  return rd && h == CLPIN_HEAD_HOST ? CLPIN_HEAD_SYNCED : h;
}

static void device_bytes(clpin_tensor *t, unsigned char *out, size_t n) {
  cl_int err =
      clEnqueueReadBuffer(queue, clpin_tensor_buffer(t), CL_TRUE, 0, n, out, 0, NULL, NULL);
  CHECK(err == CL_SUCCESS, "reading the tensor's buffer -> %d", err);
}

static void op_tensor(reader *r) {
  static const size_t esize[] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8};
  clpin_dtype dtype = (clpin_dtype)(u8(r) % 11);
  cl_uint ndim = u8(r) % 4;
  size_t shape[3], count = 1;
  for (cl_uint i = 0; i < ndim; i++)
    count *= shape[i] = u8(r) % 17;
  size_t nbytes = count * esize[dtype];
  bool create = u8(r) % 4 == 0;
  unsigned flags = u8(r) & 3;
  unsigned char seed = (unsigned char)u8(r);
  for (size_t i = 0; i < nbytes; i++)
    xbuf[i] = (unsigned char)(seed ^ (i * 13));
  clpin_tensor *t = NULL;
  cl_int err =
      create ? clpin_tensor_create(queue, dtype, ndim, shape, &t)
             : clpin_tensor_from_host(queue, nbytes ? xbuf : NULL, dtype, ndim, shape, flags, &t);
  CHECK(err == CL_SUCCESS && t, "tensor of %zu B (dtype %d, ndim %u, create %d) -> %d", nbytes,
        (int)dtype, ndim, create, err);
  CHECK(clpin_tensor_nbytes(t) == nbytes && clpin_tensor_ndim(t) == ndim &&
            clpin_tensor_dtype(t) == dtype,
        "tensor accessors");
  clpin_head head = nbytes == 0 ? CLPIN_HEAD_SYNCED
                    : create    ? CLPIN_HEAD_UNINITIALIZED
                                : CLPIN_HEAD_DEVICE;
  if (create)
    memset(tval, 0, nbytes); /* an uninitialized tensor reads as zeros */
  else
    memcpy(tval, xbuf, nbytes);
  CHECK(clpin_tensor_head(t) == head, "head %d after creation, want %d", clpin_tensor_head(t),
        head);
  for (unsigned k = u8(r) % 6; k > 0; k--) {
    unsigned what = u8(r) % 3, a = 1 + u8(r) % 3; /* 1, 2, 3: READ, WRITE, both */
    unsigned access = (a & 1 ? CLPIN_READ : 0) | (a & 2 ? CLPIN_WRITE : 0);
    size_t from = nbytes ? u16(r) % nbytes : 0, len = nbytes ? 1 + u16(r) % (nbytes - from) : 0;
    unsigned char s2 = (unsigned char)u8(r);
    for (size_t i = 0; i < nbytes; i++)
      tnew[i] = (unsigned char)(s2 + i * 3);
    if (what == 0) { /* to_host: the value, head unchanged */
      unsigned f = u8(r) & 3;
      cl_event ev = NULL;
      memset(ybuf, 0xee, nbytes);
      err = clpin_tensor_to_host(t, queue, nbytes ? ybuf : NULL, f, &ev);
      CHECK(err == CL_SUCCESS, "clpin_tensor_to_host -> %d", err);
      if (ev) {
        CHECK(clWaitForEvents(1, &ev) == CL_SUCCESS, "wait");
        clReleaseEvent(ev);
      }
      CHECK(!memcmp(ybuf, tval, nbytes), "clpin_tensor_to_host (head %d) gave other data", head);
    } else if (what == 1) { /* host side */
      void *ptr = fake;
      err = clpin_tensor_host_data(t, queue, access, &ptr);
      CHECK(err == CL_SUCCESS, "clpin_tensor_host_data(%u) -> %d", access, err);
      if (!nbytes) {
        CHECK(ptr == NULL, "host_data of an empty tensor gave %p", ptr);
        continue;
      }
      head = next_head(true, head, access);
      if (access & CLPIN_READ)
        CHECK(!memcmp(ptr, tval, nbytes), "the mirror (read access %u) differs from the value",
              access);
      if (access == CLPIN_WRITE) { /* a promise to overwrite every byte */
        memcpy(ptr, tnew, nbytes);
        memcpy(tval, tnew, nbytes);
      } else if (access & CLPIN_WRITE) {
        memcpy((char *)ptr + from, tnew, len);
        memcpy(tval + from, tnew, len);
      }
    } else { /* device side */
      cl_mem mem = (cl_mem)fake;
      err = clpin_tensor_device_data(t, queue, access, &mem);
      CHECK(err == CL_SUCCESS, "clpin_tensor_device_data(%u) -> %d", access, err);
      CHECK(mem == clpin_tensor_buffer(t), "device_data gave another buffer");
      if (!nbytes)
        continue;
      head = next_head(false, head, access);
      if (access & CLPIN_READ) {
        device_bytes(t, ybuf, nbytes);
        CHECK(!memcmp(ybuf, tval, nbytes), "the device (read access %u) differs from the value",
              access);
      }
      size_t at = access == CLPIN_WRITE ? 0 : from, n = access == CLPIN_WRITE ? nbytes : len;
      if (access & CLPIN_WRITE) {
        err = clEnqueueWriteBuffer(queue, mem, CL_TRUE, at, n, tnew, 0, NULL, NULL);
        CHECK(err == CL_SUCCESS, "writing the tensor's buffer -> %d", err);
        memcpy(tval + at, tnew, n);
      }
    }
    CHECK(clpin_tensor_head(t) == head, "head %d, want %d (call %u, access %u)",
          clpin_tensor_head(t), head, what, access);
  }
  clpin_tensor_release(t);
  clpin_stats s = settle();
  cache_known = false; /* the mirror and the staging blocks went back */
  last = s;
  check_model(&s);
}

/* Release the context's pool with whatever the program holds; keep the
 * handles to try them later; continue on a fresh pool. */
static void op_release_context(reader *r) {
  bool shutdown = u8(r) % 4 == 0;
  while (npend)
    complete_pending(0, CL_COMPLETE);
  clpin_pool *old = pool;
  if (shutdown) {
    clpin_shutdown();
  } else {
    cl_int err = clpin_pool_release_context(ctx);
    CHECK(err == CL_SUCCESS, "clpin_pool_release_context -> %d", err);
  }
  if (nstale_pools < MAX_STALE)
    stale_pools[nstale_pools++] = old;
  for (int i = 0; i < nlive; i++) {
    if (nstale_blocks < MAX_STALE)
      stale_blocks[nstale_blocks++] = live[i].b;
    if (live[i].host_alloc && nstale_hosts < MAX_STALE)
      stale_hosts[nstale_hosts++] = live[i].host;
  }
  nlive = 0;
  nreleased = 0; /* their pool is gone: they answer POOL_RELEASED now */
  nfreed = 0;
  cl_int err = clpin_pool_get_for_context(ctx, &pool);
  CHECK(err == CL_SUCCESS, "clpin_pool_get_for_context after release -> %d", err);
  CHECK(pool != old, "a released pool handle came back");
  clpin_stats s = snap();
  clpin_stats zero;
  memset(&zero, 0, sizeof zero);
  zero.struct_size = sizeof zero;
  same_stats(&zero, &s, "a fresh pool");
  memset(cached_in, 0, sizeof cached_in);
  cache_known = true;
  limit = SIZE_MAX;
  last = s;
}

static void op_stale(reader *r) {
  cl_int err = CL_SUCCESS;
  const char *what = "";
  switch (u8(r) % 6) {
  case 0:
    if (!nstale_pools)
      return;
    {
      clpin_block *b = (clpin_block *)fake;
      clpin_pool *p = stale_pools[u8(r) % (unsigned)nstale_pools];
      err = clpin_acquire(p, 1 + u8(r), &b);
      CHECK(b == (clpin_block *)fake, "stale acquire wrote *block");
      CHECK(clpin_host_alloc(p, 64) == NULL, "host_alloc on a stale pool");
      size_t off = 5;
      CHECK(clpin_pool_find(p, fake, 1, &off) == NULL && off == 5, "find on a stale pool");
      what = "acquire on a stale pool";
    }
    break;
  case 1:
    if (!nstale_pools)
      return;
    err = clpin_pool_trim(stale_pools[u8(r) % (unsigned)nstale_pools]);
    what = "trim on a stale pool";
    break;
  case 2:
    if (!nstale_pools)
      return;
    err = clpin_pool_set_limit(stale_pools[u8(r) % (unsigned)nstale_pools], u8(r));
    what = "set_limit on a stale pool";
    break;
  case 3:
    if (!nstale_pools)
      return;
    {
      /* Not an error: a released pool answers its final counters. */
      cl_int serr;
      clpin_stats s = snap_of(stale_pools[u8(r) % (unsigned)nstale_pools], &serr);
      CHECK(serr == CL_SUCCESS, "stats on a stale pool -> %d", serr);
      CHECK(s.bytes_reserved == 0 && s.blocks_in_use == 0 && s.blocks_cached == 0 &&
                s.blocks_in_flight == 0 && s.driver_allocs == s.driver_frees,
            "a released pool's final counters hold something");
      err = CLPIN_ERR_POOL_RELEASED;
      what = "stats on a stale pool";
    }
    break;
  case 4:
    if (!nstale_blocks)
      return;
    err = clpin_release(stale_blocks[u8(r) % (unsigned)nstale_blocks], NULL);
    what = "release of a block of a stale pool";
    break;
  default:
    if (!nstale_hosts)
      return;
    {
      void *p = stale_hosts[u8(r) % (unsigned)nstale_hosts];
      for (int i = 0; i < nlive; i++)
        if (live[i].host_alloc && live[i].host == p)
          return; /* the address came back */
      err = clpin_host_free(p);
      /* The first free of it says the pool released it; later ones, that it
       * is no allocation (any more). */
      CHECK(err == CLPIN_ERR_POOL_RELEASED || err == CLPIN_ERR_FOREIGN_POINTER,
            "host_free of a stale pool's pointer -> %d", err);
      err = CLPIN_ERR_POOL_RELEASED;
      what = "host_free of a stale pool's pointer";
    }
    break;
  }
  CHECK(err == CLPIN_ERR_POOL_RELEASED, "%s -> %d", what, err);
  clpin_stats s = snap();
  same_stats(&last, &s, what);
}

/* ---- one input ---------------------------------------------------------- */

/* Give everything back; the pool ends empty with no cap. */
static void finish_input(void) {
  while (npend)
    complete_pending(0, CL_COMPLETE);
  while (nlive) {
    live_t l;
    take_live(nlive - 1, &l);
    cl_int err = l.host_alloc ? clpin_host_free(l.host) : clpin_release(l.b, NULL);
    CHECK(err == CL_SUCCESS, "final release -> %d", err);
  }
  CHECK(clpin_pool_set_limit(pool, SIZE_MAX) == CL_SUCCESS, "set_limit");
  CHECK(clpin_pool_trim(pool) == CL_SUCCESS, "trim");
  clpin_stats s = settle();
  CHECK(s.bytes_reserved == 0 && s.blocks_in_use == 0 && s.blocks_in_flight == 0 &&
            s.blocks_cached == 0 && s.driver_allocs == s.driver_frees,
        "pool not empty at the end: reserved %zu in use %zu in flight %zu cached %zu allocs "
        "%llu frees %llu",
        s.bytes_reserved, s.blocks_in_use, s.blocks_in_flight, s.blocks_cached,
        (unsigned long long)s.driver_allocs, (unsigned long long)s.driver_frees);
  nreleased = nfreed = 0;
  nstale_pools = nstale_blocks = nstale_hosts = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx)
    open_cl();
  if (!pool) {
    cl_int err = clpin_pool_get_for_context(ctx, &pool);
    if (err != CL_SUCCESS) {
      fprintf(stderr, "fuzz_api: clpin_pool_get_for_context -> %d\n", err);
      abort();
    }
  }
  reader r = {data, size};
  int released_contexts = 0;
  /* The first byte sets the process-wide options the transfers read: a
   * chunk of 4 to 64 KiB, so that transfers up to DEV_SIZE take the
   * pipeline, and pinning on or off for this host-unified device. */
  unsigned cfg = u8(&r);
  if (clpin_set_option(CLPIN_OPT_CHUNK, (size_t)4096 << (cfg % 5)) != CL_SUCCESS ||
      clpin_set_option(CLPIN_OPT_PINNED, (cfg >> 3) & 1) != CL_SUCCESS ||
      clpin_set_option(CLPIN_OPT_STAGE_MIN, 0) != CL_SUCCESS || /* every size stages: the model */
      clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 0) != CL_SUCCESS) {
    fprintf(stderr, "fuzz_api: clpin_set_option failed\n");
    abort();
  }
  limit = SIZE_MAX;
  memset(cached_in, 0, sizeof cached_in);
  last = snap();
  /* Inputs start from an empty pool (see finish_input). */
  cache_known = last.blocks_cached == 0;
  for (step_no = 0; r.n && step_no < MAX_STEPS; step_no++) {
    op_no = (int)(u8(&r) % 20);
    switch (op_no) {
    case 0:
    case 1:
    case 2: op_acquire(&r); break;
    case 3: op_acquire_bad(&r); break;
    case 4:
    case 5: op_release(&r); break;
    case 6: op_release_pending(&r); break;
    case 7: op_complete(&r); break;
    case 8: op_release_bad(&r); break;
    case 9: op_host_free_bad(&r); break;
    case 10: op_find(&r); break;
    case 11: op_trim(); break;
    case 12: op_set_limit(&r); break;
    case 13: op_stats_bad(&r); break;
    case 14: op_transfer(&r); break;
    case 15: op_transfer_bad(&r); break;
    case 16:
      /* Each released pool stays allocated (stale handles stay safe), so
       * a few per input keep the fuzzer's memory bounded. */
      if (u8(&r) % 4 == 0 && released_contexts++ < 2)
        op_release_context(&r);
      break;
    case 17: op_stale(&r); break;
    case 18: op_tensor(&r); break;
    default: op_acquire(&r); break;
    }
    clpin_stats s = snap();
    check_model(&s);
    last = s;
  }
  finish_input();
  return 0;
}
