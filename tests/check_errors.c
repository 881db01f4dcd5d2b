/* SPDX-License-Identifier: Apache-2.0 */
/* Error names and versions. */
#include "testutil.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

START_TEST(every_library_code_is_named) {
#define CHECK_CODE(name, value, text)                                                              \
  ck_assert_int_eq(name, value);                                                                   \
  ck_assert_int_le(value, -20000);                                                                 \
  ck_assert_int_ge(value, -20099);                                                                 \
  ck_assert_str_eq(clpin_strerror(name), #name ": " text);
  CLPIN_ERROR_TABLE(CHECK_CODE)
  CLPIN_MPI_ERROR_TABLE(CHECK_CODE)
#undef CHECK_CODE
}
END_TEST

/* The reserved range's division (clpin.h, docs/DESIGN.md "Error codes"):
 * the core's codes in -20000 ... -20059 outside libclpin-mpi's sub-range,
 * libclpin-mpi's inside its own (clpin_mpi_errors.h), their values those
 * of 0.3.0, and clpin_strerror() names them with libclpin-mpi unloaded. */
START_TEST(each_addon_has_its_own_subrange) {
  ck_assert_int_eq(CLPIN_MPI_ERR_FIRST, -20022);
  ck_assert_int_eq(CLPIN_MPI_ERR_LAST, -20024);
  ck_assert_int_eq(CLPIN_ERR_MPI, -20022);
  ck_assert_int_eq(CLPIN_ERR_MISMATCH, -20023);
  ck_assert_int_eq(CLPIN_ERR_PEER, -20024);
#define CORE_CODE(name, value, text)                                                               \
  ck_assert_msg(value <= -20000 && value >= -20059, #name " (%d) is not the core's", value);       \
  ck_assert_msg(value > CLPIN_MPI_ERR_FIRST || value < CLPIN_MPI_ERR_LAST,                         \
                #name " (%d) lies in libclpin-mpi's sub-range", value);
  CLPIN_ERROR_TABLE(CORE_CODE)
  CLPIN_STATUS_TABLE(CORE_CODE)
#undef CORE_CODE
#define MPI_CODE(name, value, text)                                                                \
  ck_assert_msg(value <= CLPIN_MPI_ERR_FIRST && value >= CLPIN_MPI_ERR_LAST,                       \
                #name " (%d) is outside libclpin-mpi's sub-range", value);
  CLPIN_MPI_ERROR_TABLE(MPI_CODE)
#undef MPI_CODE
  /* This test links libclpin alone: the names come from the core. */
  ck_assert_ptr_nonnull(strstr(clpin_strerror(CLPIN_ERR_PEER), "CLPIN_ERR_PEER: another rank"));
}
END_TEST

/* Statuses (CLPIN_END) are named like errors, in the same range, and no
 * status shares a value with an error. */
START_TEST(every_status_is_named) {
#define CHECK_STATUS(name, value, text)                                                            \
  ck_assert_int_eq(name, value);                                                                   \
  ck_assert_int_le(value, -20000);                                                                 \
  ck_assert_int_ge(value, -20099);                                                                 \
  ck_assert_str_eq(clpin_strerror(name), #name ": " text);
  CLPIN_STATUS_TABLE(CHECK_STATUS)
#undef CHECK_STATUS
#define NOT_A_STATUS(name, value, text) ck_assert_int_ne(value, CLPIN_END);
  CLPIN_ERROR_TABLE(NOT_A_STATUS)
#undef NOT_A_STATUS
  ck_assert_int_eq(CLPIN_END, -20019); /* 0.2's value */
}
END_TEST

/* Each flag family has bits of its own (also asserted at compile time in
 * src/errors.c), and the old option name (deprecated, kept through 0.4.x)
 * is the new one. */
START_TEST(flag_families_are_disjoint) {
  unsigned fam[] = {CLPIN_TRANSFER_FLAGS, CLPIN_TENSOR_FLAGS, CLPIN_ACCESS_FLAGS,
                    CLPIN_LOADER_FLAGS};
  for (unsigned i = 0; i < 4; i++)
    for (unsigned j = i + 1; j < 4; j++)
      ck_assert_uint_eq(fam[i] & fam[j], 0);
  ck_assert_uint_eq(CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, CLPIN_TRANSFER_FLAGS);
  ck_assert_uint_eq(CLPIN_LOADER_UNORDERED & CLPIN_LOADER_FLAGS, CLPIN_LOADER_UNORDERED);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ck_assert_int_eq(CLPIN_OPT_PINNED_H2D, CLPIN_OPT_PINNED);
#pragma GCC diagnostic pop
}
END_TEST

START_TEST(opencl_codes_pass_through_named) {
  ck_assert_str_eq(clpin_strerror(CL_SUCCESS), "CL_SUCCESS: success");
  ck_assert_str_eq(clpin_strerror(CL_INVALID_VALUE), "CL_INVALID_VALUE: invalid value");
  ck_assert(strncmp(clpin_strerror(CL_MEM_OBJECT_ALLOCATION_FAILURE),
                    "CL_MEM_OBJECT_ALLOCATION_FAILURE", 32) == 0);
  ck_assert(strncmp(clpin_strerror(CL_OUT_OF_HOST_MEMORY), "CL_OUT_OF_HOST_MEMORY", 21) == 0);
}
END_TEST

START_TEST(never_null) {
  for (long c = -30000; c <= 100; c++)
    ck_assert_ptr_nonnull(clpin_strerror((cl_int)c));
  ck_assert_str_eq(clpin_strerror(-20099), "unknown error code");
  ck_assert_str_eq(clpin_strerror(12345), "unknown error code");
  ck_assert_ptr_nonnull(clpin_strerror(INT32_MIN));
}
END_TEST

START_TEST(version_matches_header) {
  ck_assert_uint_eq(clpin_version(), CLPIN_VERSION_NUMBER);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", CLPIN_VERSION_MAJOR, CLPIN_VERSION_MINOR,
           CLPIN_VERSION_PATCH);
  ck_assert_str_eq(clpin_version_string(), want);
}
END_TEST

/* A thread's detail: empty before its first failure, then its own. */
static void *fail_in_thread(void *arg) {
  (void)arg;
  static char seen[2][256];
  snprintf(seen[0], sizeof seen[0], "%s", clpin_last_error_detail());
  clpin_stats st = {0}; /* struct_size 0, but the NULL pool is found first */
  ck_assert_int_eq(clpin_pool_stats(NULL, &st), CLPIN_ERR_INVALID_ARGUMENT);
  snprintf(seen[1], sizeof seen[1], "%s", clpin_last_error_detail());
  return seen;
}

START_TEST(last_error_detail_names_the_argument) {
  ck_assert_str_eq(clpin_last_error_detail(), "");
  void *tensor = (void *)&tensor;
  ck_assert_int_eq(clpin_tensor_host_data((clpin_tensor *)tensor, NULL, 0, &tensor),
                   CL_INVALID_COMMAND_QUEUE); /* an OpenCL argument: OpenCL's code */
  const char *d = clpin_last_error_detail();
  ck_assert_ptr_nonnull(strstr(d, "clpin_tensor_host_data: "));
  ck_assert_ptr_nonnull(strstr(d, "the queue is NULL"));
  ck_assert_ptr_nonnull(strstr(d, "(CL_INVALID_COMMAND_QUEUE)"));
  char mine[256];
  snprintf(mine, sizeof mine, "%s", d);
  /* Another thread's failure neither shows here nor sees this one. */
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, fail_in_thread, NULL), 0);
  char(*seen)[256];
  ck_assert_int_eq(pthread_join(th, (void **)&seen), 0);
  ck_assert_str_eq(seen[0], "");
  ck_assert_ptr_nonnull(strstr(seen[1], "clpin_pool_stats: "));
  ck_assert_str_eq(clpin_last_error_detail(), mine);
  /* A success leaves it as it was (errno's contract). */
  ck_assert_str_eq(clpin_strerror(CL_SUCCESS), "CL_SUCCESS: success");
  ck_assert_int_eq(clpin_host_free(NULL), CL_SUCCESS);
  ck_assert_str_eq(clpin_last_error_detail(), mine);
}
END_TEST

/* ---- details in words ------------------------------------------------------ */

/* What a detail must never hold: the condition as C, internal names, or
 * CLPIN_ERR_INVALID_ARGUMENT's description, which sends the reader back
 * to the detail itself. */
static const char *const c_tokens[] = {
    "==",      "!=",      "->",   "||",         "&&",
    "<=",      ">=",      " >> ", " << ",       "magic",
    "CLPIN__", "clpin__", "__",   "says which", "(clpin_last_error_detail",
    "sizeof(*"};

/* The detail of the call that just failed with `code`: it names `fn`
 * first, says `words` somewhere, ends with the code's name alone, holds no
 * C, and no '!' glued to a name ("!ptr"). */
static void assert_words(const char *fn, cl_int code, const char *words) {
  const char *d = clpin_last_error_detail();
  char head[96], tail[96];
  snprintf(head, sizeof head, "%s: ", fn);
  ck_assert_msg(strncmp(d, head, strlen(head)) == 0, "detail \"%s\" does not start with \"%s\"", d,
                head);
  ck_assert_msg(strstr(d, words) != NULL, "detail \"%s\" does not say \"%s\"", d, words);
  const char *text = clpin_strerror(code);
  snprintf(tail, sizeof tail, "(%.*s)", (int)(strchr(text, ':') - text), text);
  size_t n = strlen(d), m = strlen(tail);
  ck_assert_msg(n > m && strcmp(d + n - m, tail) == 0, "detail \"%s\" does not end with \"%s\"", d,
                tail);
  for (size_t i = 0; i < sizeof c_tokens / sizeof *c_tokens; i++)
    ck_assert_msg(strstr(d, c_tokens[i]) == NULL, "detail \"%s\" holds \"%s\"", d, c_tokens[i]);
  for (const char *p = d; (p = strchr(p, '!')) != NULL; p++)
    ck_assert_msg(!(p[1] == '_' || (p[1] >= 'a' && p[1] <= 'z') || (p[1] >= 'A' && p[1] <= 'Z')),
                  "detail \"%s\" holds a C negation", d);
  ck_assert_uint_lt(n, 511); /* not cut short by the detail's buffer */
}

#define REFUSED(call, code, fn, words)                                                             \
  do {                                                                                             \
    ck_assert_int_eq((call), (code));                                                              \
    assert_words((fn), (code), (words));                                                           \
  } while (0)

static cl_int fill_nothing(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  (void)user, (void)index, (void)host, (void)capacity, (void)used;
  return CL_SUCCESS;
}

static test_cl T;

/* Readable memory that is no pool, block or registration of clpin's,
 * aligned as clpin's records are (a pool is 64-byte aligned: UBSan checks
 * the alignment of every member read through the pointer). */
static struct { _Alignas(64) unsigned char bytes[512]; } fake;

static void open_cl(void) { test_cl_open(&T); }
static void close_cl(void) { test_shutdown_close(&T); }

/* Every kind of refusal of the core's public calls, one or more each. */
START_TEST(details_are_words) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  clpin_block *blk = NULL;
  char *local = (char *)fake.bytes; /* memory clpin never handed out */
  memset(local, 0, sizeof fake.bytes);
  /* pools and blocks */
  REFUSED(clpin_pool_get(NULL, &pool), CL_INVALID_COMMAND_QUEUE, "clpin_pool_get", "queue is NULL");
  REFUSED(clpin_pool_get(T.queue, NULL), CLPIN_ERR_INVALID_ARGUMENT, "clpin_pool_get",
          "pool (the out-pointer) is NULL");
  REFUSED(clpin_pool_get_for_context(NULL, &pool), CL_INVALID_CONTEXT, "clpin_pool_get_for_context",
          "context is NULL");
  REFUSED(clpin_acquire(pool, 0, &blk), CLPIN_ERR_INVALID_SIZE, "clpin_acquire",
          "nbytes is 0: a block holds at least one byte");
  REFUSED(clpin_acquire(pool, SIZE_MAX, &blk), CLPIN_ERR_INVALID_SIZE, "clpin_acquire",
          "more than the pool's largest block");
  {
    char want[64];
    snprintf(want, sizeof want, "nbytes %zu is more than", SIZE_MAX);
    ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), want)); /* the value, in the text */
  }
  REFUSED(clpin_acquire(pool, 64, NULL), CLPIN_ERR_INVALID_ARGUMENT, "clpin_acquire",
          "block (the out-pointer) is NULL");
  REFUSED(clpin_acquire(NULL, 64, &blk), CLPIN_ERR_INVALID_ARGUMENT, "clpin_acquire",
          "pool is NULL");
  REFUSED(clpin_acquire((clpin_pool *)local, 64, &blk), CLPIN_ERR_INVALID_ARGUMENT, "clpin_acquire",
          "is not a pool clpin handed out");
  REFUSED(clpin_pool_trim(NULL), CLPIN_ERR_INVALID_ARGUMENT, "clpin_pool_trim", "pool is NULL");
  REFUSED(clpin_pool_set_limit(NULL, 0), CLPIN_ERR_INVALID_ARGUMENT, "clpin_pool_set_limit",
          "pool is NULL");
  clpin_stats st = {.struct_size = sizeof st};
  REFUSED(clpin_pool_stats(NULL, &st), CLPIN_ERR_INVALID_ARGUMENT, "clpin_pool_stats",
          "pool is NULL");
  REFUSED(clpin_pool_stats(pool, NULL), CLPIN_ERR_INVALID_ARGUMENT, "clpin_pool_stats",
          "stats is NULL");
  REFUSED(clpin_pool_stats((clpin_pool *)local, &st), CLPIN_ERR_INVALID_ARGUMENT,
          "clpin_pool_stats", "is not a pool clpin handed out");
  st.struct_size = 0;
  REFUSED(clpin_pool_stats(pool, &st), CLPIN_ERR_INVALID_ARGUMENT, "clpin_pool_stats",
          "stats.struct_size is 0");
  CL_OK(clpin_acquire(pool, 64, &blk));
  CL_OK(clpin_release(blk, NULL));
  REFUSED(clpin_release(blk, NULL), CLPIN_ERR_DOUBLE_RELEASE, "clpin_release", "released already");
  REFUSED(clpin_release((clpin_block *)local, NULL), CLPIN_ERR_INVALID_BLOCK, "clpin_release",
          "is not a block clpin_acquire handed out");
  REFUSED(clpin_host_free(local), CLPIN_ERR_FOREIGN_POINTER, "clpin_host_free",
          "not the start of live clpin_host_alloc memory");
  /* registration */
  REFUSED(clpin_host_register(NULL, local, 64), CLPIN_ERR_INVALID_ARGUMENT, "clpin_host_register",
          "pool is NULL");
  REFUSED(clpin_host_register(pool, NULL, 64), CLPIN_ERR_INVALID_ARGUMENT, "clpin_host_register",
          "ptr is NULL");
  REFUSED(clpin_host_register(pool, local, 0), CLPIN_ERR_INVALID_SIZE, "clpin_host_register",
          "nbytes is 0");
  REFUSED(clpin_host_register(pool, (void *)(UINTPTR_MAX - 100), 64), CLPIN_ERR_OVERFLOW,
          "clpin_host_register", "past the end of the address space");
  /* More pages than the largest buffer: refused before any page is touched. */
  REFUSED(clpin_host_register(pool, local, SIZE_MAX / 4), CLPIN_ERR_INVALID_SIZE,
          "clpin_host_register", "more than the pool's largest buffer");
  REFUSED(clpin_host_unregister(NULL), CLPIN_ERR_INVALID_ARGUMENT, "clpin_host_unregister",
          "ptr is NULL");
  REFUSED(clpin_host_unregister(local), CLPIN_ERR_NOT_REGISTERED, "clpin_host_unregister",
          "not the start of a live registration");
  /* in place */
  cl_mem mem;
  size_t off;
  REFUSED(clpin_host_buffer(NULL, local, 64, &mem, &off), CLPIN_ERR_INVALID_ARGUMENT,
          "clpin_host_buffer", "pool is NULL");
  REFUSED(clpin_host_buffer(pool, local, 0, &mem, &off), CLPIN_ERR_INVALID_SIZE,
          "clpin_host_buffer", "nbytes is 0");
  REFUSED(clpin_host_lend(T.queue, NULL, 64, 0, NULL, NULL), CLPIN_ERR_INVALID_ARGUMENT,
          "clpin_host_lend", "ptr is NULL");
  REFUSED(clpin_host_lend(T.queue, local, 64, 1, NULL, NULL), CL_INVALID_EVENT_WAIT_LIST,
          "clpin_host_lend", "malformed wait list");
  REFUSED(clpin_host_reclaim(NULL, local, 64, 0, 0, NULL, NULL), CL_INVALID_COMMAND_QUEUE,
          "clpin_host_reclaim", "queue is NULL");
  /* options */
  REFUSED(clpin_set_option((clpin_option)999, 0), CLPIN_ERR_INVALID_OPTION, "clpin_set_option",
          "opt 999 is not a clpin_option");
  REFUSED(clpin_set_option(CLPIN_OPT_THREADS, 0), CLPIN_ERR_INVALID_OPTION, "clpin_set_option",
          "value 0 is out of range for CLPIN_THREADS");
  /* transfers */
  cl_mem buf = test_buffer(&T, 4096);
  REFUSED(clpin_write(T.queue, buf, 4000, local, 200, 0, 0, NULL, NULL), CL_INVALID_VALUE,
          "clpin_write/clpin_read", "offset 4000 + nbytes 200 lies past the end of the 4096-byte");
  REFUSED(clpin_read(T.queue, buf, 0, NULL, 16, 0, 0, NULL, NULL), CL_INVALID_VALUE,
          "clpin_write/clpin_read", "host pointer is NULL");
  size_t o[3] = {0, 0, 0}, r0[3] = {0, 1, 1}, r[3] = {64, 1, 1};
  REFUSED(clpin_write_rect(T.queue, buf, o, o, r0, 0, 0, 0, 0, local, 0, 0, NULL, NULL),
          CL_INVALID_VALUE, "clpin_write_rect", "has a 0");
  REFUSED(clpin_read_rect(T.queue, buf, o, o, r, 10, 0, 0, 0, local, 0, 0, NULL, NULL),
          CL_INVALID_VALUE, "clpin_read_rect", "buffer_row_pitch 10 is less than");
  REFUSED(clpin_write_image(T.queue, buf, o, r, 0, 0, local, CLPIN_PIN_MEMORY, 0, NULL, NULL),
          CL_INVALID_MEM_OBJECT, "clpin_write_image", "a buffer, not an image");
  /* A malformed wait list: the same words, with the count, in every call
   * that takes one (clpin__check_wait_list). */
  cl_event no_event = NULL;
  REFUSED(clpin_write(T.queue, buf, 0, local, 16, 0, 2, NULL, NULL), CL_INVALID_EVENT_WAIT_LIST,
          "clpin_write/clpin_read", "malformed wait list: num_wait is 2 but wait_list is NULL");
  REFUSED(clpin_read_rect(T.queue, buf, o, o, r, 0, 0, 0, 0, local, 0, 0, &no_event, NULL),
          CL_INVALID_EVENT_WAIT_LIST, "clpin_read_rect",
          "malformed wait list: num_wait is 0 but wait_list is not NULL");
  REFUSED(clpin_file_to_buffer(T.queue, buf, 0, 16, 0, 0, 0, 1, &no_event, NULL),
          CL_INVALID_EVENT_WAIT_LIST, "clpin_file_to_buffer", "event 0 of the wait list is NULL");
  CL_OK(clReleaseMemObject(buf));
  /* tensors */
  clpin_tensor *t;
  size_t shape[2] = {4, 4}, huge[2] = {SIZE_MAX / 2, 4};
  REFUSED(clpin_tensor_create(T.queue, (clpin_dtype)99, 2, shape, &t), CLPIN_ERR_INVALID_DTYPE,
          "clpin_tensor_create", "dtype 99 is not a clpin_dtype");
  REFUSED(clpin_tensor_create(T.queue, CLPIN_F32, CLPIN_MAX_DIMS + 1, shape, &t),
          CLPIN_ERR_INVALID_SHAPE, "clpin_tensor_create", "more than CLPIN_MAX_DIMS");
  REFUSED(clpin_tensor_from_host(T.queue, local, CLPIN_F32, 2, NULL, 0, &t),
          CLPIN_ERR_INVALID_SHAPE, "clpin_tensor_from_host", "shape is NULL and ndim is 2");
  REFUSED(clpin_tensor_create(T.queue, CLPIN_F32, 2, huge, &t), CLPIN_ERR_OVERFLOW,
          "clpin_tensor_create", "overflow size_t");
  /* loader */
  clpin_loader *L;
  clpin_loader_desc desc = test_loader_desc(0, 4, 2, 1, fill_nothing, NULL);
  REFUSED(clpin_loader_create(1, &T.queue, &desc, &L), CLPIN_ERR_INVALID_SIZE,
          "clpin_loader_create", "desc.batch_bytes is 0");
  REFUSED(clpin_loader_create(1, &T.queue, NULL, &L), CLPIN_ERR_INVALID_ARGUMENT,
          "clpin_loader_create", "desc is NULL");
}
END_TEST

/* A released pool's handle: each call says so, naming itself. */
START_TEST(released_pool_is_named) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  CL_OK(clpin_pool_release_context(T.ctx));
  clpin_block *blk;
  REFUSED(clpin_acquire(pool, 64, &blk), CLPIN_ERR_POOL_RELEASED, "clpin_acquire",
          "pool was released");
  ck_assert_ptr_null(clpin_host_alloc(pool, 64));
  assert_words("clpin_host_alloc", CLPIN_ERR_POOL_RELEASED, "pool was released");
  REFUSED(clpin_pool_trim(pool), CLPIN_ERR_POOL_RELEASED, "clpin_pool_trim", "pool was released");
}
END_TEST

/* Each failing call sets its own detail: none leaves the one before. */
START_TEST(no_stale_detail) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  clpin_block *blk;
  ck_assert_int_eq(clpin_acquire(pool, 0, &blk), CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "clpin_acquire: "));
  ck_assert_ptr_null(clpin_host_alloc(NULL, 64));
  assert_words("clpin_host_alloc", CLPIN_ERR_INVALID_ARGUMENT, "pool is NULL");
  ck_assert_ptr_null(clpin_host_alloc(pool, 0));
  assert_words("clpin_host_alloc", CLPIN_ERR_INVALID_SIZE, "nbytes is 0");
  ck_assert_int_eq(clpin_pool_trim(NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(clpin_host_alloc(pool, SIZE_MAX));
  assert_words("clpin_host_alloc", CLPIN_ERR_INVALID_SIZE, "more than the pool's largest block");
  char local[64];
  ck_assert_ptr_null(clpin_pool_find(NULL, local, 1, NULL));
  assert_words("clpin_pool_find", CLPIN_ERR_INVALID_ARGUMENT, "pool is NULL");
  /* The same code twice in a row: the second call's own words. */
  ck_assert_int_eq(clpin_host_register(pool, local, 0), CLPIN_ERR_INVALID_SIZE);
  ck_assert_int_eq(clpin_acquire(pool, 0, &blk), CLPIN_ERR_INVALID_SIZE);
  assert_words("clpin_acquire", CLPIN_ERR_INVALID_SIZE, "nbytes is 0");
}
END_TEST

int main(void) {
  Suite *s = suite_create("errors");
  TCase *tc = tcase_create("errors");
  tcase_add_test(tc, every_library_code_is_named);
  tcase_add_test(tc, each_addon_has_its_own_subrange);
  tcase_add_test(tc, every_status_is_named);
  tcase_add_test(tc, flag_families_are_disjoint);
  tcase_add_test(tc, opencl_codes_pass_through_named);
  tcase_add_test(tc, never_null);
  tcase_add_test(tc, version_matches_header);
  tcase_add_test(tc, last_error_detail_names_the_argument);
  suite_add_tcase(s, tc);
  TCase *words = test_tcase(s, "words", open_cl, close_cl, 60);
  tcase_add_test(words, details_are_words);
  tcase_add_test(words, released_pool_is_named);
  tcase_add_test(words, no_stale_detail);
  return test_run_suite(s);
}
