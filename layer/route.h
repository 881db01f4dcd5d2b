/* SPDX-License-Identifier: Apache-2.0 */
/* Internal interfaces of libclpin-layer.so (not installed): route.c, the
 * intercepted transfers, which layer.c puts into the dispatch table. Above
 * objects.c (objects.h says how the layer's files stack). */
#ifndef CLPIN_LAYER_ROUTE_H
#define CLPIN_LAYER_ROUTE_H

#include "objects.h"

/* Read the layer's options (CLPIN_LAYER_MIN, CLPIN_LAYER_STATS, ...): once,
 * from clInitLayer. */
CLPIN_LAYER_HIDDEN void clpin__layer_route_init(void);

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

#endif /* CLPIN_LAYER_ROUTE_H */
