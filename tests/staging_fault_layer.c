/* An OpenCL layer (ocl-icd's OPENCL_LAYERS) that makes pinned allocations
 * fail on demand, so check_staging can drive the out-of-memory fallback
 * through the real pool: while the environment variable
 * CLPIN_TEST_FAIL_PINNED is "1", clCreateBuffer with CL_MEM_ALLOC_HOST_PTR
 * returns CL_MEM_OBJECT_ALLOCATION_FAILURE; every other call goes straight
 * to the driver. */
#include <CL/cl_icd.h>
#include <CL/cl_layer.h>

#include <stdlib.h>
#include <string.h>

static struct _cl_icd_dispatch dispatch;
static const struct _cl_icd_dispatch *target;

static cl_mem CL_API_CALL fail_create_buffer(cl_context ctx, cl_mem_flags flags, size_t size,
                                             void *host, cl_int *err) {
  const char *fail = getenv("CLPIN_TEST_FAIL_PINNED");
  if ((flags & CL_MEM_ALLOC_HOST_PTR) && fail && strcmp(fail, "1") == 0) {
    if (err)
      *err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    return NULL;
  }
  return target->clCreateBuffer(ctx, flags, size, host, err);
}

CL_API_ENTRY cl_int CL_API_CALL clGetLayerInfo(cl_layer_info name, size_t size, void *value,
                                               size_t *size_ret) {
  if (name != CL_LAYER_API_VERSION)
    return CL_INVALID_VALUE;
  cl_layer_api_version v = CL_LAYER_API_VERSION_100;
  if (value) {
    if (size < sizeof v)
      return CL_INVALID_VALUE;
    memcpy(value, &v, sizeof v);
  }
  if (size_ret)
    *size_ret = sizeof v;
  return CL_SUCCESS;
}

CL_API_ENTRY cl_int CL_API_CALL clInitLayer(cl_uint num_entries,
                                            const struct _cl_icd_dispatch *target_dispatch,
                                            cl_uint *num_entries_ret,
                                            const struct _cl_icd_dispatch **layer_dispatch_ret) {
  const cl_uint entries = sizeof dispatch / sizeof(void *);
  if (!target_dispatch || !num_entries_ret || !layer_dispatch_ret || num_entries < entries)
    return CL_INVALID_VALUE;
  target = target_dispatch;
  dispatch = *target_dispatch;
  dispatch.clCreateBuffer = fail_create_buffer;
  *num_entries_ret = entries;
  *layer_dispatch_ret = &dispatch;
  return CL_SUCCESS;
}
