/* SPDX-License-Identifier: Apache-2.0 */
/* Error names: clpin's own table (from clpin.h) and OpenCL's codes. */
#include "internal.h"
#include "vstruct.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* OpenCL 1.2 codes clpin can pass through. */
#define OPENCL_ERRORS(X)                                                                           \
  X(CL_SUCCESS, "success")                                                                         \
  X(CL_DEVICE_NOT_FOUND, "device not found")                                                       \
  X(CL_DEVICE_NOT_AVAILABLE, "device not available")                                               \
  X(CL_COMPILER_NOT_AVAILABLE, "compiler not available")                                           \
  X(CL_MEM_OBJECT_ALLOCATION_FAILURE, "memory object allocation failure")                          \
  X(CL_OUT_OF_RESOURCES, "out of resources")                                                       \
  X(CL_OUT_OF_HOST_MEMORY, "out of host memory")                                                   \
  X(CL_PROFILING_INFO_NOT_AVAILABLE, "profiling info not available")                               \
  X(CL_MEM_COPY_OVERLAP, "memory copy overlap")                                                    \
  X(CL_IMAGE_FORMAT_MISMATCH, "image format mismatch")                                             \
  X(CL_IMAGE_FORMAT_NOT_SUPPORTED, "image format not supported")                                   \
  X(CL_BUILD_PROGRAM_FAILURE, "build program failure")                                             \
  X(CL_MAP_FAILURE, "map failure")                                                                 \
  X(CL_MISALIGNED_SUB_BUFFER_OFFSET, "misaligned sub-buffer offset")                               \
  X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, "an event in the wait list failed")              \
  X(CL_COMPILE_PROGRAM_FAILURE, "compile program failure")                                         \
  X(CL_LINKER_NOT_AVAILABLE, "linker not available")                                               \
  X(CL_LINK_PROGRAM_FAILURE, "link program failure")                                               \
  X(CL_DEVICE_PARTITION_FAILED, "device partition failed")                                         \
  X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE, "kernel argument info not available")                        \
  X(CL_INVALID_VALUE, "invalid value")                                                             \
  X(CL_INVALID_DEVICE_TYPE, "invalid device type")                                                 \
  X(CL_INVALID_PLATFORM, "invalid platform")                                                       \
  X(CL_INVALID_DEVICE, "invalid device")                                                           \
  X(CL_INVALID_CONTEXT, "invalid context")                                                         \
  X(CL_INVALID_QUEUE_PROPERTIES, "invalid queue properties")                                       \
  X(CL_INVALID_COMMAND_QUEUE, "invalid command queue")                                             \
  X(CL_INVALID_HOST_PTR, "invalid host pointer")                                                   \
  X(CL_INVALID_MEM_OBJECT, "invalid memory object")                                                \
  X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, "invalid image format descriptor")                         \
  X(CL_INVALID_IMAGE_SIZE, "invalid image size")                                                   \
  X(CL_INVALID_SAMPLER, "invalid sampler")                                                         \
  X(CL_INVALID_BINARY, "invalid binary")                                                           \
  X(CL_INVALID_BUILD_OPTIONS, "invalid build options")                                             \
  X(CL_INVALID_PROGRAM, "invalid program")                                                         \
  X(CL_INVALID_PROGRAM_EXECUTABLE, "invalid program executable")                                   \
  X(CL_INVALID_KERNEL_NAME, "invalid kernel name")                                                 \
  X(CL_INVALID_KERNEL_DEFINITION, "invalid kernel definition")                                     \
  X(CL_INVALID_KERNEL, "invalid kernel")                                                           \
  X(CL_INVALID_ARG_INDEX, "invalid argument index")                                                \
  X(CL_INVALID_ARG_VALUE, "invalid argument value")                                                \
  X(CL_INVALID_ARG_SIZE, "invalid argument size")                                                  \
  X(CL_INVALID_KERNEL_ARGS, "invalid kernel arguments")                                            \
  X(CL_INVALID_WORK_DIMENSION, "invalid work dimension")                                           \
  X(CL_INVALID_WORK_GROUP_SIZE, "invalid work-group size")                                         \
  X(CL_INVALID_WORK_ITEM_SIZE, "invalid work-item size")                                           \
  X(CL_INVALID_GLOBAL_OFFSET, "invalid global offset")                                             \
  X(CL_INVALID_EVENT_WAIT_LIST, "invalid event wait list")                                         \
  X(CL_INVALID_EVENT, "invalid event")                                                             \
  X(CL_INVALID_OPERATION, "invalid operation")                                                     \
  X(CL_INVALID_GL_OBJECT, "invalid GL object")                                                     \
  X(CL_INVALID_BUFFER_SIZE, "invalid buffer size")                                                 \
  X(CL_INVALID_MIP_LEVEL, "invalid mip level")                                                     \
  X(CL_INVALID_GLOBAL_WORK_SIZE, "invalid global work size")                                       \
  X(CL_INVALID_PROPERTY, "invalid property")                                                       \
  X(CL_INVALID_IMAGE_DESCRIPTOR, "invalid image descriptor")                                       \
  X(CL_INVALID_COMPILER_OPTIONS, "invalid compiler options")                                       \
  X(CL_INVALID_LINKER_OPTIONS, "invalid linker options")                                           \
  X(CL_INVALID_DEVICE_PARTITION_COUNT, "invalid device partition count")

/* Kept from clang-format 14, which joins a macro that ends in a one-line case
 * label to the directive after it ("text; #define OPENCL_CASE"). */
/* clang-format off */
#define CLPIN_CASE(name, value, text)                                                              \
  case name: return #name ": " text;
#define OPENCL_CASE(name, text)                                                                    \
  case name: return #name ": " text;
/* clang-format on */

const char *clpin_strerror(cl_int code) {
  switch (code) {
    CLPIN_ERROR_TABLE(CLPIN_CASE)
    CLPIN_STATUS_TABLE(CLPIN_CASE)
    /* The add-ons' sub-ranges (clpin.h includes their tables): a value in
     * two tables is a duplicate case, which does not compile. */
    CLPIN_MPI_ERROR_TABLE(CLPIN_CASE)
    OPENCL_ERRORS(OPENCL_CASE)
  default: return "unknown error code";
  }
}

/* The last failure's detail, per thread (errno's contract: meaningful only
 * right after a call that failed; a success leaves it as it was). */
static _Thread_local char last_detail[512];

const char *clpin__code_name(cl_int code, char *buf, size_t len) {
  const char *text = clpin_strerror(code);
  const char *colon = strchr(text, ':');
  if (colon)
    snprintf(buf, len, "%.*s", (int)(colon - text), text);
  else
    snprintf(buf, len, "code %d", (int)code);
  return buf;
}

/* The code's name only: its description is for clpin_strerror(), and one
 * (CLPIN_ERR_INVALID_ARGUMENT's) sends the reader to this very detail. */
void clpin__fail(const char *func, cl_int code, const char *why) {
  char name[64];
  snprintf(last_detail, sizeof last_detail, "%s: %s (%s)", func, why,
           clpin__code_name(code, name, sizeof name));
  clpin__log("%s", last_detail);
}

void clpin__failf(const char *func, cl_int code, const char *fmt, ...) {
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  clpin__fail(func, code, why);
}

const char *clpin_last_error_detail(void) { return last_detail; }

/* Each flag of clpin.h: its name and the calls it is for, in words. */
static const struct {
  unsigned bit;
  const char *name, *use;
} flags_known[] = {
    {CLPIN_PIN_MEMORY, "CLPIN_PIN_MEMORY",
     "a transfer flag, for clpin_write, clpin_read, the rect, image and tensor copies"},
    {CLPIN_NON_BLOCKING, "CLPIN_NON_BLOCKING",
     "a transfer flag, for the transfers, the tensor copies, the file transfers and "
     "clpin_host_reclaim"},
    {CLPIN_ZERO_COPY, "CLPIN_ZERO_COPY", "the tensor flag, for clpin_tensor_from_host only"},
    {CLPIN_READ, "CLPIN_READ",
     "an access flag, for clpin_tensor_host_data and clpin_tensor_device_data"},
    {CLPIN_WRITE, "CLPIN_WRITE",
     "an access flag, for clpin_tensor_host_data and clpin_tensor_device_data"},
    {CLPIN_LOADER_UNORDERED, "CLPIN_LOADER_UNORDERED", "a loader flag, for clpin_loader_desc"},
    {CLPIN_LOADER_WAIT_UPLOADS, "CLPIN_LOADER_WAIT_UPLOADS",
     "a loader flag, for clpin_loader_desc"},
    {CLPIN_LOADER_HOST_DONE, "CLPIN_LOADER_HOST_DONE", "a loader flag, for clpin_loader_desc"},
    {CLPIN_FILE_DIRECT, "CLPIN_FILE_DIRECT",
     "a file flag, for clpin_file_to_buffer and clpin_buffer_to_file"},
};

cl_int clpin__check_flags(const char *func, const char *arg, unsigned flags, unsigned allowed,
                          const char *takes) {
  unsigned bad = flags & ~allowed;
  if (!bad)
    return CL_SUCCESS;
  char why[400];
  unsigned bit = bad & (0u - bad); /* the lowest wrong bit */
  size_t i = 0, n = sizeof flags_known / sizeof flags_known[0];
  while (i < n && flags_known[i].bit != bit)
    i++;
  if (i == n)
    snprintf(why, sizeof why, "%s has unknown bits 0x%x: it takes %s", arg, bad, takes);
  else
    snprintf(why, sizeof why, "%s holds %s, which this call does not take (%s is %s): it takes %s",
             arg, flags_known[i].name, flags_known[i].name, flags_known[i].use, takes);
  clpin__fail(func, CLPIN_ERR_INVALID_ARGUMENT, why);
  return CLPIN_ERR_INVALID_ARGUMENT;
}

cl_int clpin__check_wait_list(const char *func, cl_uint num_wait, const cl_event *wait_list) {
  CLPIN__CHECK_IN(func, (num_wait == 0) != (wait_list == NULL), CL_INVALID_EVENT_WAIT_LIST,
                  "malformed wait list: num_wait is %u but wait_list is %s", num_wait,
                  wait_list ? "not NULL" : "NULL");
  for (cl_uint i = 0; i < num_wait; i++)
    CLPIN__CHECK_IN(func, !wait_list[i], CL_INVALID_EVENT_WAIT_LIST,
                    "event %u of the wait list is NULL", i);
  return CL_SUCCESS;
}

/* Each flag family has bits of its own (clpin.h, "API rules"). */
_Static_assert((CLPIN_TRANSFER_FLAGS & CLPIN_TENSOR_FLAGS) == 0,
               "transfer and tensor flags share a bit");
_Static_assert((CLPIN_TRANSFER_FLAGS & CLPIN_ACCESS_FLAGS) == 0,
               "transfer and access flags share a bit");
_Static_assert((CLPIN_TRANSFER_FLAGS & CLPIN_LOADER_FLAGS) == 0,
               "transfer and loader flags share a bit");
_Static_assert((CLPIN_TENSOR_FLAGS & CLPIN_ACCESS_FLAGS) == 0,
               "tensor and access flags share a bit");
_Static_assert((CLPIN_TENSOR_FLAGS & CLPIN_LOADER_FLAGS) == 0,
               "tensor and loader flags share a bit");
_Static_assert((CLPIN_ACCESS_FLAGS & CLPIN_LOADER_FLAGS) == 0,
               "access and loader flags share a bit");
_Static_assert(((CLPIN_TRANSFER_FLAGS | CLPIN_TENSOR_FLAGS | CLPIN_ACCESS_FLAGS |
                 CLPIN_LOADER_FLAGS) &
                CLPIN_FILE_FLAGS) == 0,
               "the file flags share a bit with another family");
_Static_assert(CLPIN_FILE_DIRECT == CLPIN_FILE_FLAGS, "file family");
_Static_assert((CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING) == CLPIN_TRANSFER_FLAGS, "transfer family");
_Static_assert(CLPIN_ZERO_COPY == CLPIN_TENSOR_FLAGS, "tensor family");
_Static_assert((CLPIN_READ | CLPIN_WRITE) == CLPIN_ACCESS_FLAGS, "access family");
_Static_assert((CLPIN_LOADER_UNORDERED | CLPIN_LOADER_WAIT_UPLOADS | CLPIN_LOADER_HOST_DONE) ==
                   CLPIN_LOADER_FLAGS,
               "loader family");
/* What the calls take (internal.h) stays within clpin.h's families. */
_Static_assert(CLPIN__FLAGS_TRANSFER == CLPIN_TRANSFER_FLAGS, "transfer calls");
_Static_assert(CLPIN__FLAGS_TENSOR == (CLPIN_TRANSFER_FLAGS | CLPIN_TENSOR_FLAGS), "tensor calls");
_Static_assert(CLPIN__FLAGS_ACCESS == CLPIN_ACCESS_FLAGS, "access calls");
_Static_assert(CLPIN__FLAGS_RECLAIM == CLPIN_NON_BLOCKING, "clpin_host_reclaim");
_Static_assert(CLPIN__FLAGS_FILE == (CLPIN_NON_BLOCKING | CLPIN_FILE_FLAGS), "file calls");
_Static_assert(CLPIN__FLAGS_LOADER == CLPIN_LOADER_FLAGS, "loader");

cl_int clpin__struct_in(const char *func, const char *arg, void *dst, size_t cur, const void *src,
                        size_t min) {
  size_t n;
  memcpy(&n, src, sizeof n);
  char why[200];
  if (clpin__vstruct_short(arg, NULL, n, min, why, sizeof why)) {
    clpin__fail(func, CLPIN_ERR_INVALID_ARGUMENT, why);
    return CLPIN_ERR_INVALID_ARGUMENT;
  }
  for (size_t i = cur; i < n; i++) {
    if (((const unsigned char *)src)[i]) {
      snprintf(why, sizeof why,
               "%s.struct_size is %zu, larger than this library's %zu, and byte %zu past it is "
               "not zero: a field of a newer clpin this one cannot honour",
               arg, n, cur, i);
      clpin__fail(func, CLPIN_ERR_INVALID_ARGUMENT, why);
      return CLPIN_ERR_INVALID_ARGUMENT;
    }
  }
  memcpy(dst, src, n < cur ? n : cur);
  memcpy(dst, &cur, sizeof cur);
  return CL_SUCCESS;
}

cl_int clpin__struct_out(const char *func, const char *arg, void *dst, const void *src, size_t cur,
                         size_t min) {
  size_t n;
  memcpy(&n, dst, sizeof n);
  char why[200];
  if (clpin__vstruct_short(arg, NULL, n, min, why, sizeof why)) {
    clpin__fail(func, CLPIN_ERR_INVALID_ARGUMENT, why);
    return CLPIN_ERR_INVALID_ARGUMENT;
  }
  clpin__vstruct_out(dst, src, cur);
  return CL_SUCCESS;
}

bool clpin__is_oom(cl_int err) {
  return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
         err == CL_OUT_OF_HOST_MEMORY;
}

unsigned clpin_version(void) { return CLPIN_VERSION_NUMBER; }

#define CLPIN_STR2(x) #x
#define CLPIN_STR(x) CLPIN_STR2(x)
const char *clpin_version_string(void) {
  return CLPIN_STR(CLPIN_VERSION_MAJOR) "." CLPIN_STR(CLPIN_VERSION_MINOR) "." CLPIN_STR(
      CLPIN_VERSION_PATCH);
}
