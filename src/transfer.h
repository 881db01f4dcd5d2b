/* SPDX-License-Identifier: Apache-2.0 */
/* Transfers (transfer.c): the entry of clpin_write / clpin_read, and the
 * path choice every buffer, rect and image transfer goes through. */
#ifndef CLPIN_TRANSFER_H
#define CLPIN_TRANSFER_H

#include "shape.h"

/* Route a rect or image transfer whose arguments rect.c has
 * checked (x->pool unset): the paths of clpin_write/clpin_read. */
cl_int clpin__transfer_shaped(clpin__xfer *x);

#endif /* CLPIN_TRANSFER_H */
