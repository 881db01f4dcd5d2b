/* SPDX-License-Identifier: Apache-2.0 */
/* The syntax of clpin's size options, in a file of its own (no other part
 * of the library) so that bench/ compiles the same parser. */
#ifndef CLPIN_SIZE_H
#define CLPIN_SIZE_H

#include <stdbool.h>
#include <stddef.h>

/* Parse a decimal size with an optional K/M/G/T suffix (powers of 1024; an
 * optional "i" and "B" after it); false on any malformed input or
 * overflow, *out untouched then. */
bool clpin__parse_size(const char *text, size_t *out);

#endif /* CLPIN_SIZE_H */
