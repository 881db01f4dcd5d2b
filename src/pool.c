/* SPDX-License-Identifier: Apache-2.0 */
/* A pool: its creation for a context (devices, DMA queues, NUMA node
 * groups), its accessors, the driver allocation of block buffers, control
 * and stats, and its end (close, drain, destroy). The block cache is
 * pool_blocks.c, memory by pointer pool_hostmem.c, handles pool_handle.c. */
#include "pool_impl.h"
#include "events.h"
#include "options.h"
#include "topo.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

/* ---- driver allocation -------------------------------------------------- */

/* The memory of a NUMA-placed block: clpin maps and binds it (mbind, in
 * topo.c) and hands it to the driver as CL_MEM_USE_HOST_PTR, which pins it
 * where the driver pins such memory (NVIDIA does, as registration relies
 * on: docs/STAGING.md). Binding the mapping, not the allocating thread's
 * policy around an ALLOC_HOST_PTR create, is what decides placement on every
 * driver: with ALLOC_HOST_PTR the pages land wherever the driver or the
 * first thread to touch them runs (POCL: the first copy). NULL mapping when
 * the kernel refuses the node: the block is then an ALLOC_HOST_PTR one,
 * still kept on its group's lists. */
static cl_mem create_placed(clpin_pool *pool, const struct clpin__node_group *g, size_t cap,
                            clpin_block *blk, cl_int *err) {
  size_t len = (cap + 4095) & ~(size_t)4095;
  void *p = clpin__topo_map_on_node(len, g->node);
  if (!p) {
    clpin__log("pool %p: cannot bind %zu B to node %d (%s): not placed", (void *)pool, cap, g->node,
               strerror(errno));
    return clCreateBuffer(pool->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, cap, NULL, err);
  }
  cl_mem buf = clCreateBuffer(pool->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, cap, p, err);
  if (*err != CL_SUCCESS) {
    munmap(p, len);
    return NULL;
  }
  blk->mapping = p;
  blk->mapping_len = len;
  return buf;
}

static void unmap_placed(clpin_block *blk) {
  if (blk->mapping)
    munmap(blk->mapping, blk->mapping_len);
  blk->mapping = NULL;
  blk->mapping_len = 0;
}

cl_int clpin__alloc_buffer(clpin_pool *pool, size_t cap, clpin_block *blk) {
  cl_int err;
  const struct clpin__node_group *g = &pool->groups[blk->group];
  blk->mapping = NULL;
  cl_mem buf = g->bind ? create_placed(pool, g, cap, blk, &err)
                       : clCreateBuffer(pool->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, cap,
                                        NULL, &err);
  if (err != CL_SUCCESS) {
    unmap_placed(blk);
    return err;
  }
  void *p = clEnqueueMapBuffer(pool->queue, buf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, cap, 0,
                               NULL, NULL, &err);
  if (err == CL_SUCCESS && !p)
    err = CL_MAP_FAILURE;
  if (err != CL_SUCCESS) {
    clReleaseMemObject(buf);
    unmap_placed(blk);
    return err;
  }
  blk->buffer = buf;
  blk->host = p;
  clpin__handoff_init(&blk->handoff);
  return CL_SUCCESS;
}

/* Release a block's buffer and, for a placed one, its mapping once the
 * driver is done with it: the unmap is finished first (the buffer may go
 * only after), and the release is the last reference (no DMA still uses a
 * block being freed). */
void clpin__drop_buffer(clpin_pool *pool, clpin_block *blk) {
  if (blk->mapping)
    clFinish(pool->queue);
  cl_int err = clReleaseMemObject(blk->buffer);
  if (err != CL_SUCCESS)
    clpin__log("pool %p: release of %zu B failed: %s", (void *)pool, blk->size,
               clpin_strerror(err));
  unmap_placed(blk);
}

/* Unmap and release a block's buffer; the block is no longer counted
 * anywhere. Failures are logged: the buffer is released regardless, so a
 * failing unmap cannot leak it. */
void clpin__free_buffer(clpin_pool *pool, clpin_block *blk) {
  UNPOISON(blk);
  clpin__index_remove(pool, blk);
  /* A block handed to the device (a pool's release) is unmapped already. */
  cl_int err = clpin__handoff_end(&blk->handoff)
                   ? clEnqueueUnmapMemObject(pool->queue, blk->buffer, blk->host, 0, NULL, NULL)
                   : CL_SUCCESS;
  if (err != CL_SUCCESS)
    clpin__log("pool %p: unmap of %zu B failed: %s", (void *)pool, blk->size, clpin_strerror(err));
  else
    clFlush(pool->queue);
  clpin__drop_buffer(pool, blk);
  size_t left = atomic_fetch_sub(&pool->reserved_total, blk->size) - blk->size;
  clpin__log_event("pool %p: freed %zu B block (%zu B reserved)", (void *)pool, blk->size, left);
  clpin__recycle_block_struct(pool, blk);
}

/* Take an idle block off its bucket for freeing. Bucket lock held. */
void clpin__uncount_cached(clpin_pool *pool, stripe *bk, clpin_block *blk) {
  count_move(bk, blk, COUNT_CACHED, COUNT_NONE);
  bk->driver_frees++;
  if (limited(pool))
    atomic_fetch_sub_explicit(&pool->cached_total, blk->size, memory_order_relaxed);
}

/* ---- control and stats -------------------------------------------------- */

cl_int clpin_pool_trim(clpin_pool *pool) {
  cl_int err = clpin__pool_enter_for(__func__, "pool", &pool);
  CLPIN__PASS(err);
  clpin__poll_all(pool);
  size_t freed = clpin__free_idle(pool);
  clpin__log_event("pool %p: trim freed %zu B", (void *)pool, freed);
  clpin__pool_leave(pool);
  return CL_SUCCESS;
}

cl_int clpin_pool_set_limit(clpin_pool *pool, size_t max_cached_bytes) {
  cl_int err = clpin__pool_enter_for(__func__, "pool", &pool);
  CLPIN__PASS(err);
  atomic_store(&pool->limit, max_cached_bytes);
  /* cached_total is kept only while a cap is set: recount it with every
   * bucket held, so no release slips between the count and the new cap. */
  lock_all(pool);
  size_t cached = 0;
  for (unsigned i = 0; i < NLISTS(pool); i++)
    cached += pool->lists[i].bytes[COUNT_CACHED];
  atomic_store(&pool->cached_total, cached);
  unlock_all(pool);
  if (clpin__debug()) {
    char cap[32];
    clpin__log("pool %p: cap on idle bytes set to %s", (void *)pool,
               clpin__format_size(max_cached_bytes, cap, sizeof cap));
  }
  clpin__poll_all(pool);
  clpin__enforce_cap(pool);
  clpin__pool_leave(pool);
  return CL_SUCCESS;
}

/* The counters, with every stripe locked so they agree with each other. */
static void snapshot(clpin_pool *pool, clpin_stats *out) {
  clpin_stats s;
  memset(&s, 0, sizeof s);
  lock_all(pool);
  for (unsigned i = 0; i < NLISTS(pool); i++) {
    const stripe *bk = &pool->lists[i];
    s.hits += bk->hits;
    s.misses += bk->misses;
    s.driver_allocs += bk->driver_allocs;
    s.driver_frees += bk->driver_frees;
    s.blocks_cached += bk->blocks[COUNT_CACHED];
    s.bytes_cached += bk->bytes[COUNT_CACHED];
    s.blocks_in_use += bk->blocks[COUNT_IN_USE];
    s.bytes_in_use += bk->bytes[COUNT_IN_USE];
    s.blocks_in_flight += bk->blocks[COUNT_IN_FLIGHT];
    s.bytes_in_flight += bk->bytes[COUNT_IN_FLIGHT];
    s.bytes_requested += bk->bytes_requested;
    s.bytes_reserved += bk->bytes_reserved;
  }
  unlock_all(pool);
  s.peak_bytes_reserved = atomic_load(&pool->peak_reserved);
  s.oom_retries = atomic_load(&pool->oom_retries);
  s.fallbacks = atomic_load(&pool->counters[CLPIN__FALLBACKS]);
  s.bytes_pinned_direct = atomic_load(&pool->counters[CLPIN__BYTES_PINNED_DIRECT]);
  s.bytes_staged = atomic_load(&pool->counters[CLPIN__BYTES_STAGED]);
  s.bytes_pipelined = atomic_load(&pool->counters[CLPIN__BYTES_PIPELINED]);
  s.bytes_unpinned = atomic_load(&pool->counters[CLPIN__BYTES_UNPINNED]);
  s.bytes_registered = atomic_load(&pool->regs.bytes);
  s.bytes_zero_copy = atomic_load(&pool->counters[CLPIN__BYTES_ZERO_COPY]);
  s.bytes_file_read = atomic_load(&pool->counters[CLPIN__BYTES_FILE_READ]);
  s.bytes_file_written = atomic_load(&pool->counters[CLPIN__BYTES_FILE_WRITTEN]);
  *out = s;
}

cl_int clpin_pool_stats(clpin_pool *handle, clpin_stats *stats) {
  CLPIN__CHECK_FORK(); /* a snapshot takes the stripes' locks */
  /* A released pool still answers: its final counters, until its slot is
   * reused (registry.c); then CLPIN_ERR_POOL_RELEASED. */
  clpin_pool *pool = clpin__untag(handle);
  unsigned tag = clpin__tag(handle);
  CLPIN__CHECK_WHY(!pool, CLPIN_ERR_INVALID_ARGUMENT, "pool is NULL");
  CLPIN__CHECK_FMT(pool->magic != CLPIN__POOL_MAGIC, CLPIN_ERR_INVALID_ARGUMENT,
                   "pool (%p) is not a pool clpin handed out", (void *)handle);
  CLPIN__CHECK_WHY(!stats, CLPIN_ERR_INVALID_ARGUMENT, "stats is NULL");
  CLPIN__CHECK_FMT(stats->struct_size < CLPIN_STATS_SIZE_V0_1, CLPIN_ERR_INVALID_ARGUMENT,
                   "stats.struct_size is %zu, below the first released layout (%zu): set it to "
                   "sizeof(clpin_stats)",
                   stats->struct_size, (size_t)CLPIN_STATS_SIZE_V0_1);
  clpin_stats s;
  clpin_pool *inside = handle;
  cl_int err = clpin__pool_enter(&inside);
  if (err == CL_SUCCESS) {
    /* Land the blocks whose events completed, so the snapshot is current. */
    clpin__poll_all(pool);
    snapshot(pool, &s);
    clpin__pool_leave(pool);
  } else {
    /* Released, or being released right now: the release publishes the
     * final counters once it has freed everything. A reused slot (now, or
     * while waiting or copying) has none of this pool's left. */
    bool gone = err != CLPIN_ERR_POOL_RELEASED;
    while (!gone && !atomic_load_explicit(&pool->final_ready, memory_order_acquire)) {
      gone = tag && atomic_load(&pool->gen) != tag;
      sched_yield();
    }
    if (!gone)
      s = pool->final;
    gone = gone || (tag && atomic_load(&pool->gen) != tag);
    CLPIN__CHECK_WHY(gone, err,
                     "pool was released and its slot now serves another pool: its final "
                     "counters are gone");
  }
  s.struct_size = sizeof s;
  return clpin__struct_out(__func__, "stats", stats, &s, sizeof s, CLPIN_STATS_SIZE_V0_1);
}

void clpin__count(clpin_pool *pool, clpin__counter c, uint64_t amount) {
  if (pool && (unsigned)c < CLPIN__COUNTER_COUNT)
    atomic_fetch_add_explicit(&pool->counters[c], amount, memory_order_relaxed);
}

void clpin__pool_report_unreleased(clpin_pool *pool) {
  clpin_stats s;
  snapshot(pool, &s); /* no OpenCL call: the driver may be gone at exit */
  clpin__log("pool %p of context %p was never released (clpin_pool_release_context): it "
             "holds the context and %zu pinned bytes in %zu blocks (%zu in use)",
             (void *)pool, (void *)pool->ctx, s.bytes_reserved,
             s.blocks_cached + s.blocks_in_use + s.blocks_in_flight, s.blocks_in_use);
}

/* ---- pool life ---------------------------------------------------------- */

clpin__reg_table *clpin__pool_regs(clpin_pool *pool) { return &pool->regs; }

clpin_pool **clpin__pool_link(clpin_pool *pool) { return &pool->next; }

cl_context clpin__pool_context(const clpin_pool *pool) {
  return ((const clpin_pool *)clpin__untag(pool))->ctx;
}
cl_command_queue clpin__pool_queue(const clpin_pool *pool) {
  return ((const clpin_pool *)clpin__untag(pool))->queue;
}
/* The getters below read a live pool; they take the struct (clpin's own
 * paths) or a caller's handle (the tests, the layer), whose generation bits
 * they drop. */
cl_command_queue clpin__pool_dma_queue(const clpin_pool *pool, cl_device_id device, int dir) {
  pool = clpin__untag(pool);
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      return pool->dma[i][dir != 0];
  return NULL;
}

int clpin__pool_device_node(const clpin_pool *pool, cl_device_id device) {
  pool = clpin__untag(pool);
  return pool->groups[group_of(pool, device)].node;
}

const void *clpin__pool_device_cpus(const clpin_pool *pool, cl_device_id device) {
  pool = clpin__untag(pool);
  const struct clpin__node_group *g = &pool->groups[group_of(pool, device)];
  return g->has_cpus ? &g->cpus : NULL;
}

void clpin__pool_count_device(clpin_pool *pool, cl_command_queue q, int dir, uint64_t nbytes) {
  pool = clpin__untag(pool);
  cl_device_id device = NULL;
  if (clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof device, &device, NULL) != CL_SUCCESS)
    return;
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      atomic_fetch_add_explicit(&pool->dev_bytes[i][dir != 0], nbytes, memory_order_relaxed);
}

uint64_t clpin__pool_device_bytes(clpin_pool *pool, cl_device_id device, int dir) {
  pool = clpin__untag(pool);
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      return atomic_load(&pool->dev_bytes[i][dir != 0]);
  return 0;
}

int clpin__block_node(const clpin_block *block) {
  const clpin_block *b = block_ok(block);
  const clpin_pool *pool = b ? atomic_load(&((clpin_block *)b)->pool) : NULL;
  return pool ? pool->groups[b->group].node : -1;
}
size_t clpin__pool_max_alloc(const clpin_pool *pool) {
  return ((const clpin_pool *)clpin__untag(pool))->max_alloc;
}

bool clpin__pool_device_unified(const clpin_pool *pool, cl_device_id device) {
  pool = clpin__untag(pool);
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      return pool->unified[i];
  return false;
}

static cl_int query_devices(clpin_pool *pool) {
  cl_uint n = 0;
  cl_int err = clGetContextInfo(pool->ctx, CL_CONTEXT_NUM_DEVICES, sizeof n, &n, NULL);
  if (err != CL_SUCCESS)
    return err;
  if (n == 0)
    return CLPIN_ERR_NO_DEVICE;
  pool->devices = calloc(n, sizeof *pool->devices);
  pool->unified = calloc(n, sizeof *pool->unified);
  pool->dma = calloc(n, sizeof *pool->dma);
  pool->group = calloc(n, sizeof *pool->group);
  pool->dev_bytes = calloc(n, sizeof *pool->dev_bytes);
  if (!pool->devices || !pool->unified || !pool->dma || !pool->group || !pool->dev_bytes)
    return CL_OUT_OF_HOST_MEMORY;
  err = clGetContextInfo(pool->ctx, CL_CONTEXT_DEVICES, n * sizeof *pool->devices, pool->devices,
                         NULL);
  if (err != CL_SUCCESS)
    return err;
  pool->ndevices = n;
  pool->max_alloc = SIZE_MAX;
  for (cl_uint i = 0; i < n; i++) {
    cl_bool unified = CL_FALSE;
    cl_ulong max_alloc = 0;
    err = clGetDeviceInfo(pool->devices[i], CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified,
                          NULL);
    if (err == CL_SUCCESS)
      err = clGetDeviceInfo(pool->devices[i], CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc,
                            &max_alloc, NULL);
    if (err != CL_SUCCESS)
      return err;
    pool->unified[i] = unified == CL_TRUE;
    if (max_alloc < pool->max_alloc)
      pool->max_alloc = (size_t)max_alloc;
  }
  return pool->max_alloc ? CL_SUCCESS : CLPIN_ERR_NO_DEVICE;
}

#define LISTS_BYTES(pool) ((size_t)NLISTS(pool) * sizeof(stripe))

/* CLPIN_NUMA: each device's node (topo.c), and the node groups whose free
 * lists keep its blocks. Placement is on with CLPIN_NUMA=1 wherever a
 * device's node is known (on a host of one node, always: that node), with
 * auto (the default) only on hosts with more than one node. A device whose
 * node is unknown shares the unplaced group. */
static cl_int place_devices(clpin_pool *pool) {
  pool->groups = calloc(pool->ndevices, sizeof *pool->groups);
  if (!pool->groups)
    return CL_OUT_OF_HOST_MEMORY;
  size_t mode = clpin__opt(CLPIN_OPT_NUMA);
  int nodes = mode ? clpin__topo_node_count() : 1;
  bool on = mode == 1 || (mode == CLPIN_NUMA_AUTO && nodes > 1);
  pool->ngroups = 0;
  for (cl_uint i = 0; i < pool->ndevices; i++) {
    char why[200];
    int node = -1;
    if (!on) {
      snprintf(why, sizeof why, "%s",
               mode == 0 ? "CLPIN_NUMA=0" : "one NUMA node (CLPIN_NUMA=auto)");
    } else {
      node = clpin__topo_device_node(pool->devices[i], why, sizeof why);
      /* Forced on, a device that names no node on a host of one node is on
       * that node: there is no other (a VM's GPU often reports -1). */
      int only = node < 0 && mode == 1 ? clpin__topo_only_node() : -1;
      if (only >= 0) {
        size_t l = strlen(why);
        snprintf(why + l, sizeof why - l, "; CLPIN_NUMA=1: the host's only node");
        node = only;
      }
    }
    unsigned g = 0;
    while (g < pool->ngroups && pool->groups[g].node != node)
      g++;
    if (g == pool->ngroups) {
      struct clpin__node_group *ng = &pool->groups[g];
      ng->node = node;
      ng->bind = node >= 0;
      ng->has_cpus = node >= 0 && clpin__topo_node_cpus(node, &ng->cpus);
      pool->ngroups++;
    }
    pool->group[i] = g;
    if (node >= 0)
      clpin__log("pool %p: device %u -> NUMA node %d: %s; its blocks bound there, its copies on "
                 "%d CPU(s)",
                 (void *)pool, i, node, why,
                 pool->groups[g].has_cpus ? CPU_COUNT(&pool->groups[g].cpus) : 0);
    else
      clpin__log("pool %p: device %u -> no NUMA placement: %s", (void *)pool, i, why);
  }
  return CL_SUCCESS;
}

static void release_device_queues(clpin_pool *pool) {
  for (cl_uint i = 0; pool->dma && i < pool->ndevices; i++)
    for (int d = 0; d < 2; d++)
      if (pool->dma[i][d]) {
        clReleaseCommandQueue(pool->dma[i][d]);
        pool->dma[i][d] = NULL;
      }
}

static void free_pool_struct(clpin_pool *pool) {
  if (pool->lists)
    munmap(pool->lists, LISTS_BYTES(pool));
  free(pool->devices);
  free(pool->unified);
  free(pool->dma);
  free(pool->group);
  free(pool->groups);
  free(pool->dev_bytes);
  free(pool->quarantine);
  pool->devices = NULL;
  pool->unified = NULL;
  pool->dma = NULL;
  pool->group = NULL;
  pool->groups = NULL;
  pool->dev_bytes = NULL;
  pool->quarantine = NULL;
  pool->quarantine_max = pool->quarantine_len = 0;
  pool->lists = NULL;
  /* The struct itself stays in the arena. */
}

cl_int clpin__pool_create(cl_context ctx, clpin_pool **out) {
  cl_int err = CL_OUT_OF_HOST_MEMORY;
  bool retained = false;
  clpin_pool *pool = clpin__pool_take_slot();
  if (!pool)
    return CL_OUT_OF_HOST_MEMORY;
  err = clRetainContext(ctx);
  if (err != CL_SUCCESS)
    goto fail;
  retained = true;
  pool->ctx = ctx;
  err = query_devices(pool);
  if (err == CL_SUCCESS)
    err = place_devices(pool);
  if (err != CL_SUCCESS)
    goto fail;
  /* Anonymous memory is zeroed; sizeof(stripe) is a multiple of 64. */
  void *lists =
      mmap(NULL, LISTS_BYTES(pool), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (lists == MAP_FAILED) {
    err = CL_OUT_OF_HOST_MEMORY;
    goto fail;
  }
  pool->lists = lists;
  pool->queue = clCreateCommandQueue(ctx, pool->devices[0], 0, &err);
  /* Every device's own DMA queues: a transfer's DMA runs on its caller's
   * device, never through another device's queue (docs/DESIGN.md,
   * "Topology and footprint"). */
  for (cl_uint i = 0; i < pool->ndevices && err == CL_SUCCESS; i++)
    for (int d = 0; d < 2 && err == CL_SUCCESS; d++)
      pool->dma[i][d] = clCreateCommandQueue(ctx, pool->devices[i], 0, &err);
  if (err != CL_SUCCESS)
    goto fail;
  pool->quarantine_max = clpin__opt(CLPIN_OPT_QUARANTINE);
  if (pool->quarantine_max) {
    pool->quarantine = calloc(pool->quarantine_max, sizeof *pool->quarantine);
    if (!pool->quarantine) {
      err = CL_OUT_OF_HOST_MEMORY;
      goto fail;
    }
  }
  atomic_store(&pool->limit, clpin__opt(CLPIN_OPT_MAX_CACHED));
  if (clpin__debug()) {
    char cap[32];
    clpin__log(
        "pool %p: created for context %p (%u device(s), unified=%d, max alloc %zu B, cap %s, "
        "quarantine %zu)",
        (void *)pool, (void *)ctx, pool->ndevices, (int)pool->unified[0], pool->max_alloc,
        clpin__format_size(atomic_load(&pool->limit), cap, sizeof cap), pool->quarantine_max);
  }
  atomic_store(&pool->released, false); /* open: the last store */
  *out = pool;
  return CL_SUCCESS;
fail:
  clpin__log("pool for context %p: creation failed: %s", (void *)ctx, clpin_strerror(err));
  release_device_queues(pool);
  if (pool->queue)
    clReleaseCommandQueue(pool->queue);
  if (retained)
    clReleaseContext(ctx);
  free_pool_struct(pool);
  clpin__pool_spare_slot(pool); /* never seen by anyone: its generation may stay */
  return err;
}

/* Destruction: wait for every in-flight block's event and drop it. The
 * buffers are freed with all the others right after. */
static void wait_in_flight(clpin_pool *pool) {
  for (unsigned i = 0; i < NLISTS(pool); i++) {
    stripe *bk = &pool->lists[i];
    clpin__lock(&bk->lock);
    clpin_block *list = bk->flight;
    bk->flight = NULL;
    stripe_unlock(bk);
    for (clpin_block *blk = list; blk; blk = blk->next) {
      clpin__event_settle(blk->pending);
      clReleaseEvent(blk->pending);
      blk->pending = NULL;
    }
  }
}

void clpin__pool_close(clpin_pool *pool) {
  /* From here on no user can enter (clpin__pool_enter reads the flag after
   * counting itself in). */
  atomic_store(&pool->released, true);
}

void clpin__pool_drain(clpin_pool *pool) { clpin__pool_wait_users(pool); }

void clpin__pool_destroy(clpin_pool *pool) {
  wait_in_flight(pool);
  /* Every block still holding a buffer: cached, and in use by the caller. */
  size_t in_use = 0;
  for (unsigned i = 0; i < NLISTS(pool); i++) {
    stripe *bk = &pool->lists[i];
    in_use += bk->blocks[COUNT_IN_USE];
    bk->driver_frees += bk->blocks_reserved;
    memset(bk->blocks, 0, sizeof bk->blocks);
    memset(bk->bytes, 0, sizeof bk->bytes);
    bk->bytes_requested = bk->blocks_reserved = bk->bytes_reserved = 0;
    bk->free = NULL;
  }
  /* The quarantined blocks are in the index: freed below with the rest. */
  pool->quarantine_len = pool->quarantine_bytes = 0;
  if (in_use)
    clpin__log("pool %p: releasing the context frees %zu block(s) still in use", (void *)pool,
               in_use);
  for (size_t i = 0; i < pool->nindex; i++)
    if (pool->index[i]->host_alloc &&
        atomic_load_explicit(&pool->index[i]->state, memory_order_relaxed) == BLOCK_IN_USE)
      clpin__orphan_add(pool->index[i]->host);
  while (pool->nindex > 0)
    clpin__free_buffer(pool, pool->index[pool->nindex - 1]);
  clFinish(pool->queue);
  clReleaseCommandQueue(pool->queue);
  release_device_queues(pool);
  clReleaseContext(pool->ctx);
  clpin__log("pool %p: released (context %p)", (void *)pool, (void *)pool->ctx);
  free(pool->index);
  pool->index = NULL;
  pool->nindex = pool->capindex = 0;
  snapshot(pool, &pool->final);
  free_pool_struct(pool);
  clpin__spare_blocks_add(pool);
  atomic_store_explicit(&pool->final_ready, true, memory_order_release);
}

void clpin__pool_free_retired(clpin_pool *pool) {
  /* The pool and block structs live in the arena until the process ends;
   * what remains on the heap goes. */
  free_pool_struct(pool);
}
