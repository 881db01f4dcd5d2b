/* SPDX-License-Identifier: Apache-2.0 */
/* Transfers (transfer.c): the entry of clpin_write / clpin_read, and the
 * path choice every buffer, rect and image transfer goes through. */
#ifndef CLPIN_TRANSFER_H
#define CLPIN_TRANSFER_H

#include "shape.h"

/* Route a rect or image transfer whose arguments rect.c has
 * checked (x->pool unset): the paths of clpin_write/clpin_read. */
cl_int clpin__transfer_shaped(clpin__xfer *x);

/* Shared with the file transfers (files.c). Whether an event of x's wait
 * list has already failed. */
bool clpin__wait_list_failed(const clpin__xfer *x);
/* Wait until x's turn has come on x->q (its wait list and, on an in-order
 * queue, every command before it): a marker, waited for. */
cl_int clpin__wait_for_turn(const clpin__xfer *x);
/* A staged transfer once its path is chosen: a non-blocking one goes to the
 * engine (which then owns x's file descriptors: x->file keeps none), a
 * blocking one runs here, an upload once its turn has come (what was
 * queued before it has ended: for a file, a non-blocking write to it). */
cl_int clpin__staged_transfer(clpin__xfer *x);
/* What the driver would refuse at once (another context's buffer, host
 * access the buffer's flags forbid), checked before staging. */
cl_int clpin__check_access(const clpin__xfer *x);

#endif /* CLPIN_TRANSFER_H */
