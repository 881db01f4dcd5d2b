/* SPDX-License-Identifier: Apache-2.0 */
/* The syntax of clpin's size options, in a file of its own (no other part
 * of the library) so that bench/ and libclpin-mpi compile the same parser. */
#ifndef CLPIN_SIZE_H
#define CLPIN_SIZE_H

#include <stdbool.h>
#include <stddef.h>

/* Parse a decimal size with an optional K/M/G/T suffix (powers of 1024; an
 * optional "i" and "B" after it); false on any malformed input or
 * overflow, *out untouched then. */
bool clpin__parse_size(const char *text, size_t *out);

/* A size option's value (CLPIN_CHUNK, libclpin-mpi's CLPIN_MPI_CHUNK): text
 * as clpin__parse_size reads it, from min to max. NULL and *out set when it
 * is one; else why not, in the words of the line that ignores it ("not a
 * size", "below the minimum size", "out of range"), *out untouched. */
const char *clpin__size_option(const char *text, size_t min, size_t max, size_t *out);

#endif /* CLPIN_SIZE_H */
