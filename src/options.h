/* SPDX-License-Identifier: Apache-2.0 */
/* Option helpers for clpin's own log lines (options.c). Not installed. */
#ifndef CLPIN_OPTIONS_H
#define CLPIN_OPTIONS_H

#include <stddef.h>

/* Write a size as a user would: "unlimited" for SIZE_MAX (the "no cap"
 * value), "8M" when it is a whole number of KiB/MiB/GiB/TiB, else plain
 * bytes. Returns buf. For CLPIN_DEBUG lines such as a pool's cap. */
const char *clpin__format_size(size_t v, char *buf, size_t len);

#endif
