/* SPDX-License-Identifier: Apache-2.0 */
/* libclpin-layer.so: the ICD loader's side.
 *
 * The ICD loader (ocl-icd >= 2.3, or the Khronos ICD loader) dlopens each library
 * named in OPENCL_LAYERS, checks clGetLayerInfo's API version and calls
 * clInitLayer (newer Khronos ICD loaders: clInitLayerWithProperties) with the
 * next stage's dispatch table. We return a copy of it with a few entries
 * replaced: the object bookkeeping's (objects.c) and the transfers'
 * (route.c); every other call goes straight to the next stage. */
#include "objects.h"
#include "route.h"

#include <CL/cl_layer.h>

#include <string.h>

static cl_icd_dispatch table;

/* ---- the layer interface ---------------------------------------------------- */

#define LAYER_API CL_API_ENTRY __attribute__((visibility("default")))

LAYER_API cl_int CL_API_CALL clGetLayerInfo(cl_layer_info param, size_t size, void *value,
                                            size_t *size_ret);
LAYER_API cl_int CL_API_CALL clInitLayer(cl_uint num_entries, const cl_icd_dispatch *target,
                                         cl_uint *num_entries_ret,
                                         const cl_icd_dispatch **dispatch_ret);
LAYER_API cl_int CL_API_CALL clInitLayerWithProperties(cl_uint num_entries,
                                                       const cl_icd_dispatch *target,
                                                       cl_uint *num_entries_ret,
                                                       const cl_icd_dispatch **dispatch_ret,
                                                       const cl_properties *properties);

static cl_int give(const void *src, size_t n, size_t size, void *value, size_t *size_ret) {
  if (value) {
    if (size < n)
      return CL_INVALID_VALUE;
    memcpy(value, src, n);
  }
  if (size_ret)
    *size_ret = n;
  return CL_SUCCESS;
}

cl_int CL_API_CALL clGetLayerInfo(cl_layer_info param, size_t size, void *value, size_t *size_ret) {
  static const cl_layer_api_version version = CL_LAYER_API_VERSION_100;
  static const char name[] = "clpin: pinned staging for clEnqueueWriteBuffer/ReadBuffer";
  switch (param) {
  case CL_LAYER_API_VERSION: return give(&version, sizeof version, size, value, size_ret);
  case CL_LAYER_NAME: return give(name, sizeof name, size, value, size_ret);
  default: return CL_INVALID_VALUE;
  }
}

cl_int CL_API_CALL clInitLayer(cl_uint num_entries, const cl_icd_dispatch *target,
                               cl_uint *num_entries_ret, const cl_icd_dispatch **dispatch_ret) {
  const cl_uint ours = (cl_uint)(sizeof(cl_icd_dispatch) / sizeof(void *));
  if (!target || !num_entries_ret || !dispatch_ret)
    return CL_INVALID_VALUE;
  /* An ICD loader that knows fewer entries than our headers: the rest stay NULL,
   * and an entry is wrapped only where the next stage has it. */
  memset(&clpin__layer_next, 0, sizeof clpin__layer_next);
  memcpy(&clpin__layer_next, target, (num_entries < ours ? num_entries : ours) * sizeof(void *));
  table = clpin__layer_next;
  clpin__layer_objects_wrap(&table);
#define WRAP(name, fn)                                                                             \
  if (clpin__layer_next.name)                                                                      \
    table.name = fn;
  /* clpin's engine needs the calls it makes; without them, route nothing. */
  if (clpin__layer_next.clEnqueueMarkerWithWaitList && clpin__layer_next.clCreateUserEvent &&
      clpin__layer_next.clGetEventInfo && clpin__layer_next.clGetMemObjectInfo) {
    WRAP(clEnqueueWriteBuffer, clpin__layer_write)
    WRAP(clEnqueueReadBuffer, clpin__layer_read)
    WRAP(clEnqueueWriteBufferRect, clpin__layer_write_rect)
    WRAP(clEnqueueReadBufferRect, clpin__layer_read_rect)
    WRAP(clEnqueueWriteImage, clpin__layer_write_image)
    WRAP(clEnqueueReadImage, clpin__layer_read_image)
  }
#undef WRAP
  clpin__layer_route_init();
  *num_entries_ret = ours;
  *dispatch_ret = &table;
  return CL_SUCCESS;
}

/* Properties name ICD loader features (deinitialisation style); none changes
 * what this layer does, so every list is accepted. */
cl_int CL_API_CALL clInitLayerWithProperties(cl_uint num_entries, const cl_icd_dispatch *target,
                                             cl_uint *num_entries_ret,
                                             const cl_icd_dispatch **dispatch_ret,
                                             const cl_properties *properties) {
  (void)properties;
  return clInitLayer(num_entries, target, num_entries_ret, dispatch_ret);
}
