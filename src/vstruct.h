/* SPDX-License-Identifier: Apache-2.0 */
/* The versioned-struct rule of clpin.h ("API rules") as plain steps, in a
 * file of its own (no other part of the library, no error record) so that
 * libclpin-mpi compiles the same rule: each library records a refusal in
 * its own last-error detail. errors.c's clpin__struct_in / clpin__struct_out
 * are the core's use of it. */
#ifndef CLPIN_VSTRUCT_H
#define CLPIN_VSTRUCT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether a caller's struct_size n is below `min` (the first released
 * layout, the struct's ..._SIZE_V0_x macro): then true, and why in words
 * into buf ("<arg>.struct_size is N, below the first released layout (M):
 * set it to sizeof(<type>)"; type NULL: "the struct's sizeof"). */
bool clpin__vstruct_short(const char *arg, const char *type, size_t n, size_t min, char *buf,
                          size_t len);
/* The library's struct `src` (cur bytes, its own struct_size first) into
 * the caller's `dst` up to dst's struct_size (already checked against the
 * minimum): fields past cur read 0, and dst's struct_size stays as the
 * caller set it. */
void clpin__vstruct_out(void *dst, const void *src, size_t cur);

#endif /* CLPIN_VSTRUCT_H */
