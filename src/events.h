/* SPDX-License-Identifier: Apache-2.0 */
/* Event helpers (events.c). */
#ifndef CLPIN_EVENTS_H
#define CLPIN_EVENTS_H

#include "internal.h"

/* A new user event on ctx, already complete, for calls that had nothing to
 * enqueue but were asked for an event. */
cl_int clpin__completed_event(cl_context ctx, cl_event *event);
/* The event's execution status: CL_COMPLETE, a negative failure, or a
 * positive state still running; CLPIN__STATUS_UNKNOWN (positive: not known
 * to have ended) when the query itself fails. */
#define CLPIN__STATUS_UNKNOWN 0x7fffffff
cl_int clpin__event_status(cl_event ev);
/* clSetUserEventStatus, retried for a while when it fails. */
void clpin__set_user_status(cl_event ev, cl_int status);
/* Wait until ev has ended, completed or failed. False when not even its
 * status can be read: the command may still be using its memory. */
bool clpin__event_settle(cl_event ev);

/* Wait for ev: CL_SUCCESS once it completed, else its failure (or the
 * wait's, when its status cannot be read). */
cl_int clpin__event_wait(cl_event ev);
/* Wait for n events, answering as clWaitForEvents does (CL_SUCCESS, or
 * CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST when one failed, ...), but
 * on return every event whose status can be read has ended, even when one
 * failed early or the wait itself broke: the memory their commands use is
 * free again. */
cl_int clpin__events_settle(cl_uint n, const cl_event *events);

/* An event on q that ends once the n events of wl have ended and, on an
 * in-order q, every command enqueued on q before it: where a transfer clpin
 * runs itself takes its turn. A marker of wl when n > 0. With n == 0, on an
 * in-order q, a barrier, never a marker: NVIDIA's driver makes a marker
 * with an empty wait list wait for every queue of the context (copies
 * beside a kernel on another queue then ran in turn, 1.93x), a barrier for
 * q alone, and on an in-order q the two mean the same. On an out-of-order
 * q a barrier would hold back the caller's later commands too, and a
 * command with no wait list waits for nothing there: the event is a user
 * event already complete, and nothing is enqueued. */
cl_int clpin__enqueue_turn(cl_command_queue q, cl_uint n, const cl_event *wl, cl_event *event);

#endif /* CLPIN_EVENTS_H */
