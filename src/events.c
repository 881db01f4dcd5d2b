/* SPDX-License-Identifier: Apache-2.0 */
/* Event helpers shared by the pool, staging, the engine, tensors and the
 * loader: every wait on an event goes through here. */
#include "events.h"

#include <time.h>

cl_int clpin__completed_event(cl_context ctx, cl_event *event) {
  cl_int err;
  cl_event e = clCreateUserEvent(ctx, &err);
  if (err != CL_SUCCESS)
    return err;
  err = clSetUserEventStatus(e, CL_COMPLETE);
  if (err != CL_SUCCESS) {
    clReleaseEvent(e);
    return err;
  }
  *event = e;
  return CL_SUCCESS;
}

cl_int clpin__event_status(cl_event ev) {
  cl_int status = CL_QUEUED;
  if (clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) !=
      CL_SUCCESS)
    return CLPIN__STATUS_UNKNOWN;
  return status;
}

void clpin__set_user_status(cl_event ev, cl_int status) {
  /* A failure here would leave everything behind the event waiting for
   * good: try again, briefly, before giving up. */
  for (int tries = 0; tries < 1000; tries++) {
    if (clSetUserEventStatus(ev, status) == CL_SUCCESS)
      return;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  clpin__log("events: could not set a user event's status; commands behind it stay blocked");
}

bool clpin__event_settle(cl_event ev) {
  if (clWaitForEvents(1, &ev) == CL_SUCCESS)
    return true;
  /* clWaitForEvents also fails when the event failed, or when the wait
   * itself broke: poll until the status says ended. */
  for (;;) {
    cl_int status;
    if (clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) !=
        CL_SUCCESS)
      return false;
    if (status <= CL_COMPLETE)
      return true;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

cl_int clpin__events_settle(cl_uint n, const cl_event *events) {
  cl_int err = clWaitForEvents(n, events);
  if (err != CL_SUCCESS)
    for (cl_uint i = 0; i < n; i++)
      clpin__event_settle(events[i]);
  return err;
}

/* Wait for ev: CL_SUCCESS once it completed. A failed wait is looked at
 * again: the command may have completed all the same (the wait broke), or
 * failed (its code, or the wait's when the status cannot be read). */
cl_int clpin__event_wait(cl_event ev) {
  cl_int err = clWaitForEvents(1, &ev);
  if (err == CL_SUCCESS || !clpin__event_settle(ev))
    return err;
  cl_int status = clpin__event_status(ev);
  return status == CL_COMPLETE ? CL_SUCCESS : status < 0 ? status : err;
}

cl_int clpin__enqueue_turn(cl_command_queue q, cl_uint n, const cl_event *wl, cl_event *event) {
  if (n > 0)
    return clEnqueueMarkerWithWaitList(q, n, wl, event);
  cl_command_queue_properties props = 0;
  cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
  if (err != CL_SUCCESS)
    return err;
  if (!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE))
    return clEnqueueBarrierWithWaitList(q, 0, NULL, event);
  cl_context ctx;
  err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
  return err == CL_SUCCESS ? clpin__completed_event(ctx, event) : err;
}
