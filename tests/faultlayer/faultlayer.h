/* SPDX-License-Identifier: Apache-2.0 */
/*
 * faultlayer — an OpenCL layer (cl_loader_layers, ocl-icd >= 2.3) for tests.
 *
 * Load it with OPENCL_LAYERS=/abs/path/libclpin_faultlayer.so. It wraps the
 * OpenCL entry points clpin calls and can:
 *   - count the calls of each entry point;
 *   - make the N-th call of an entry point (counted from arming) fail with a
 *     chosen code, without calling the driver ("the driver said no and did
 *     nothing"), once or for several calls in a row;
 *   - count the live OpenCL objects (references) it saw created, retained and
 *     released, per handle, so a test can assert that nothing leaks.
 *
 * The control functions below live in the layer itself. A test links the
 * layer (or dlopens the same path): the dynamic loader maps the file once, so
 * the ocl-icd instance and the test's calls share one state. Everything is
 * thread-safe; the driver is never called with the layer's lock held (POCL
 * runs event callbacks inline, and they call back into OpenCL).
 *
 *   - with FAULTLAYER_HOLD=1, hold every command enqueued on a queue until
 *     the queue is flushed (clFlush, clFinish, a blocking enqueue on it,
 *     clReleaseCommandQueue, clWaitForEvents on one of its events): an
 *     implementation that submits lazily, as the specification allows and
 *     Mesa's rusticl does, made of an eager one (POCL). Each command waits
 *     for a user event of its queue's (the gate), completed at the flush; a
 *     program that waits for, polls or expects a callback from a command it
 *     never flushed hangs, and the test's timeout names it;
 *   - count markers enqueued with an empty wait list (clEnqueueMarker, or
 *     clEnqueueMarkerWithWaitList with none): on NVIDIA such a marker waits
 *     for every queue of the context, where a barrier waits for its own.
 *
 * Without the control API, FAULTLAYER_ARM="entry:nth[:count[:code]]" arms
 * one fault at load time, and FAULTLAYER_REPORT=1 prints the call counts and
 * the live objects at exit, so any program can be run under the layer.
 */
#ifndef CLPIN_FAULTLAYER_H
#define CLPIN_FAULTLAYER_H

#include <stdio.h>

#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAULTLAYER_API __attribute__((visibility("default")))

/* Kinds of OpenCL objects the layer tracks. */
typedef enum {
  FAULTLAYER_MEM,
  FAULTLAYER_EVENT,
  FAULTLAYER_QUEUE,
  FAULTLAYER_CONTEXT,
  FAULTLAYER_PROGRAM,
  FAULTLAYER_KERNEL,
  FAULTLAYER_KIND_COUNT
} faultlayer_kind;

/* 1 once ocl-icd has loaded the layer (clInitLayer ran), else 0. A test that
 * needs the layer fails when this is 0: it never passes without it. */
FAULTLAYER_API int faultlayer_active(void);

/* The wrapped entry points, by index 0 .. faultlayer_entry_count()-1. */
FAULTLAYER_API int faultlayer_entry_count(void);
FAULTLAYER_API const char *faultlayer_entry_name(int entry);
/* Index of an entry point by name ("clCreateBuffer"), or -1. */
FAULTLAYER_API int faultlayer_entry_index(const char *name);

/* Calls of an entry point since the last faultlayer_reset_calls(). */
FAULTLAYER_API unsigned long faultlayer_calls(int entry);
FAULTLAYER_API void faultlayer_reset_calls(void);

/* Make calls nth .. nth+count-1 of entry (1-based, counted from now) fail
 * with code (count 0: every call from the nth on). Replaces any armed fault.
 * A failed call does not reach the driver: create functions return NULL and
 * set *errcode_ret, others return code. */
FAULTLAYER_API void faultlayer_arm(int entry, unsigned long nth, unsigned long count, cl_int code);
FAULTLAYER_API void faultlayer_disarm(void);
/* How many calls the armed fault has failed so far (reset by arm). */
FAULTLAYER_API unsigned long faultlayer_fired(void);

/* Live references of a kind: created or retained minus released, counted
 * over every call seen through the layer. */
FAULTLAYER_API long faultlayer_live(faultlayer_kind kind);
FAULTLAYER_API const char *faultlayer_kind_name(faultlayer_kind kind);
/* Releases of handles the layer never saw alive (over-release, or a handle
 * created before the layer was loaded). */
FAULTLAYER_API unsigned long faultlayer_bad_releases(void);
/* Releases (clRelease*) that an injected fault refused, ever; their objects are
 * still alive in the driver. faultlayer_settle() releases each refused
 * handle that is still alive once through the driver, and returns how many
 * it released: call it when every other reference should be gone. */
FAULTLAYER_API unsigned long faultlayer_refused_releases(void);
FAULTLAYER_API int faultlayer_settle(void);
/* Live references of a kind that refused releases still owe (what
 * faultlayer_settle() would release now). */
FAULTLAYER_API long faultlayer_owed(faultlayer_kind kind);
/* Print the live handles with their kind and reference count. */
FAULTLAYER_API void faultlayer_dump_live(FILE *out);

/* The next blocking clEnqueueMapBuffer that succeeds returns the mapping at
 * another address (a copy the layer holds; its unmap copies the bytes back):
 * a driver that moved a mapping, as OpenCL allows for ALLOC_HOST_PTR
 * buffers. */
FAULTLAYER_API void faultlayer_move_next_map(void);

/* 1 when FAULTLAYER_HOLD holds commands until their queue is flushed. */
FAULTLAYER_API int faultlayer_holding(void);
/* Commands held behind a gate so far (0 without FAULTLAYER_HOLD). */
FAULTLAYER_API unsigned long faultlayer_held(void);
/* Markers enqueued with an empty wait list so far (clEnqueueMarker, and
 * clEnqueueMarkerWithWaitList with no event), from the layer's load. */
FAULTLAYER_API unsigned long faultlayer_empty_markers(void);

/* The test's own calls inside a fault window: straight to the next stage,
 * neither counted nor faulted. Only calls that create or drop no reference
 * are offered, so the live counts stay exact. An event callback the driver
 * runs inline from one of them still calls clpin, and clpin's calls are
 * counted as usual. */
FAULTLAYER_API cl_int faultlayer_raw_set_user_event_status(cl_event event, cl_int status);
FAULTLAYER_API cl_int faultlayer_raw_wait_for_events(cl_uint n, const cl_event *events);
FAULTLAYER_API cl_int faultlayer_raw_finish(cl_command_queue queue);
/* The event's CL_EVENT_COMMAND_EXECUTION_STATUS, or the query's error. */
FAULTLAYER_API cl_int faultlayer_raw_event_status(cl_event event);

#ifdef __cplusplus
}
#endif
#endif
