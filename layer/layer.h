/* SPDX-License-Identifier: Apache-2.0 */
/* Internal interfaces of libclpin-layer.so (not installed).
 *
 * The layer is two files: layer.c is the ICD loader's side (clGetLayerInfo,
 * clInitLayer, the dispatch table) and the bookkeeping of objects the layer
 * must know about (contexts the application holds, host memory that is
 * mapped, wraps a USE_HOST_PTR buffer or is SVM); route.c vets each
 * clEnqueueWriteBuffer / clEnqueueReadBuffer and either hands it to clpin or
 * to the next stage untouched. The transfer work itself is clpin's, from a
 * private copy of the library built into this .so (see cl_redirect.h). */
#ifndef CLPIN_LAYER_H
#define CLPIN_LAYER_H

#include <CL/cl_icd.h>

#include <stdbool.h>
#include <stddef.h>

#define CLPIN_LAYER_HIDDEN __attribute__((visibility("hidden")))

/* The next stage (next layer, or the ICD loader's own table): every OpenCL call
 * the layer or its copy of clpin makes goes through it. */
extern CLPIN_LAYER_HIDDEN cl_icd_dispatch clpin__layer_next;

/* ---- layer.c: bookkeeping -------------------------------------------------- */

/* A transfer on ctx may go through clpin: the layer saw the context created
 * and the application still holds a reference to it. On true the context is
 * marked busy until clpin__layer_ctx_leave(): its last clReleaseContext
 * waits for routed transfers to return before it frees the pool. */
CLPIN_LAYER_HIDDEN bool clpin__layer_ctx_enter(cl_context ctx);
CLPIN_LAYER_HIDDEN void clpin__layer_ctx_leave(cl_context ctx);

/* Whether [p, p+n) overlaps host memory the driver already treats specially:
 * a mapped region, the host memory of a live CL_MEM_USE_HOST_PTR buffer, or
 * SVM. Such transfers go to the driver untouched. */
CLPIN_LAYER_HIDDEN bool clpin__layer_host_claimed(const void *p, size_t n);

/* ---- route.c: the intercepted transfers ------------------------------------ */

CLPIN_LAYER_HIDDEN void clpin__layer_route_init(void);
/* Keep an event the layer made (a marker in front of a non-blocking routed
 * transfer) until it has completed; released by later calls or with its
 * context. */
CLPIN_LAYER_HIDDEN void clpin__layer_release_markers(cl_context ctx);

CLPIN_LAYER_HIDDEN cl_int CL_API_CALL clpin__layer_write(cl_command_queue q, cl_mem mem,
                                                         cl_bool blocking, size_t offset,
                                                         size_t size, const void *ptr,
                                                         cl_uint num_wait, const cl_event *wait,
                                                         cl_event *event);
CLPIN_LAYER_HIDDEN cl_int CL_API_CALL clpin__layer_read(cl_command_queue q, cl_mem mem,
                                                        cl_bool blocking, size_t offset,
                                                        size_t size, void *ptr, cl_uint num_wait,
                                                        const cl_event *wait, cl_event *event);
/* Rect and image transfers, vetted and routed by the same rules. */
CLPIN_LAYER_HIDDEN cl_int CL_API_CALL clpin__layer_write_rect(
    cl_command_queue q, cl_mem mem, cl_bool blocking, const size_t *buffer_origin,
    const size_t *host_origin, const size_t *region, size_t buffer_row_pitch,
    size_t buffer_slice_pitch, size_t host_row_pitch, size_t host_slice_pitch, const void *ptr,
    cl_uint num_wait, const cl_event *wait, cl_event *event);
CLPIN_LAYER_HIDDEN cl_int CL_API_CALL clpin__layer_read_rect(
    cl_command_queue q, cl_mem mem, cl_bool blocking, const size_t *buffer_origin,
    const size_t *host_origin, const size_t *region, size_t buffer_row_pitch,
    size_t buffer_slice_pitch, size_t host_row_pitch, size_t host_slice_pitch, void *ptr,
    cl_uint num_wait, const cl_event *wait, cl_event *event);
CLPIN_LAYER_HIDDEN cl_int CL_API_CALL
clpin__layer_write_image(cl_command_queue q, cl_mem image, cl_bool blocking, const size_t *origin,
                         const size_t *region, size_t row_pitch, size_t slice_pitch,
                         const void *ptr, cl_uint num_wait, const cl_event *wait, cl_event *event);
CLPIN_LAYER_HIDDEN cl_int CL_API_CALL
clpin__layer_read_image(cl_command_queue q, cl_mem image, cl_bool blocking, const size_t *origin,
                        const size_t *region, size_t row_pitch, size_t slice_pitch, void *ptr,
                        cl_uint num_wait, const cl_event *wait, cl_event *event);

#endif /* CLPIN_LAYER_H */
