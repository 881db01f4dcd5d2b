/* SPDX-License-Identifier: Apache-2.0 */
/* Internal interfaces of libclpin-layer.so (not installed): objects.c.
 *
 * The layer is three files, each using only those below it (docs/DESIGN.md,
 * "The layer map"; ci/layers.sh checks it): objects.c keeps the objects the
 * layer must know about (the next stage, contexts the application holds, host
 * memory that is mapped, wraps a USE_HOST_PTR buffer or is SVM, the markers
 * the layer made); route.c vets each intercepted transfer and either hands it
 * to clpin or to the next stage untouched; layer.c is the ICD loader's side
 * (clGetLayerInfo, clInitLayer, the dispatch table). The transfer work itself
 * is clpin's, from a private copy of the library built into this .so (see
 * cl_redirect.h). */
#ifndef CLPIN_LAYER_OBJECTS_H
#define CLPIN_LAYER_OBJECTS_H

#include <CL/cl_icd.h>

#include <stdbool.h>
#include <stddef.h>

#define CLPIN_LAYER_HIDDEN __attribute__((visibility("hidden")))

/* The next stage (next layer, or the ICD loader's own table): every OpenCL call
 * the layer or its copy of clpin makes goes through it. Set by clInitLayer. */
extern CLPIN_LAYER_HIDDEN cl_icd_dispatch clpin__layer_next;

/* Put the wrappers of the calls that create and release the objects below
 * into table, where the next stage has the call. */
CLPIN_LAYER_HIDDEN void clpin__layer_objects_wrap(cl_icd_dispatch *table);

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

/* Keep an event the layer made (a marker in front of a non-blocking routed
 * transfer) until it has completed; released by a later sweep, or with its
 * context. */
CLPIN_LAYER_HIDDEN void clpin__layer_hold_marker(cl_event ev, cl_context ctx);
/* Release held markers: those of ctx (NULL: none) whatever their state, and
 * every completed one. */
CLPIN_LAYER_HIDDEN void clpin__layer_sweep_markers(cl_context ctx);

#endif /* CLPIN_LAYER_OBJECTS_H */
