/* An OpenCL layer whose clEnqueueWriteBufferRect does nothing and returns
 * CL_SUCCESS: under it, a program's call costs the loader and this layer
 * only, so what clpin_write_rect costs beyond the same call is clpin's own
 * part (small-cost.c). Everything else passes to the driver. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl_layer.h>
#include <string.h>

static struct _cl_icd_dispatch next, table;

static cl_int CL_API_CALL nothing(cl_command_queue q, cl_mem m, cl_bool blocking, const size_t *bo,
                                  const size_t *ho, const size_t *region, size_t brp, size_t bsp,
                                  size_t hrp, size_t hsp, const void *p, cl_uint nw,
                                  const cl_event *wl, cl_event *ev) {
  (void)q, (void)m, (void)blocking, (void)bo, (void)ho, (void)region, (void)brp, (void)bsp;
  (void)hrp, (void)hsp, (void)p, (void)nw, (void)wl, (void)ev;
  return CL_SUCCESS;
}

CL_API_ENTRY cl_int CL_API_CALL clGetLayerInfo(cl_layer_info param, size_t size, void *value,
                                               size_t *size_ret) {
  cl_layer_api_version v = CL_LAYER_API_VERSION_100;
  if (param != CL_LAYER_API_VERSION || (value && size < sizeof v))
    return CL_INVALID_VALUE;
  if (value)
    memcpy(value, &v, sizeof v);
  if (size_ret)
    *size_ret = sizeof v;
  return CL_SUCCESS;
}

CL_API_ENTRY cl_int CL_API_CALL clInitLayer(cl_uint num, const struct _cl_icd_dispatch *target,
                                            cl_uint *num_ret,
                                            const struct _cl_icd_dispatch **dispatch) {
  cl_uint ours = sizeof next / sizeof(void *);
  memcpy(&next, target, (num < ours ? num : ours) * sizeof(void *));
  table = next;
  table.clEnqueueWriteBufferRect = nothing;
  *num_ret = ours;
  *dispatch = &table;
  return CL_SUCCESS;
}
