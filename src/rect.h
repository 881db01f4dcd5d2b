/* SPDX-License-Identifier: Apache-2.0 */
/* Rect and image transfers (rect.c): the argument check, for the OpenCL
 * layer, which vets an application's clEnqueue{Write,Read}BufferRect /
 * clEnqueue{Write,Read}Image calls by the rules clpin applies. Internal. */
#ifndef CLPIN_RECT_H
#define CLPIN_RECT_H

#include "clpin.h"

#include <stdbool.h>

typedef struct {
  size_t host_lo; /* the host bytes the call touches lie in [ptr + host_lo, */
  size_t span;    /*   ptr + host_lo + span) */
  size_t packed;  /* bytes of the region itself */
  bool plain;     /* clpin would make the driver's own call (a 1D image array) */
} clpin__rect_geometry;

/* Check a rect (image false: origin is buffer_origin, pitch the four of
 * clEnqueueWriteBufferRect) or image call (pitch[0..1]: row and slice
 * pitch; host_origin unused) as clpin_write_rect / clpin_write_image do,
 * with the same codes; on CL_SUCCESS describe it in *g. Only queries mem. */
cl_int clpin__rect_vet(bool image, cl_mem mem, const size_t origin[3], const size_t host_origin[3],
                       const size_t region[3], const size_t pitch[4], clpin__rect_geometry *g);

#endif /* CLPIN_RECT_H */
