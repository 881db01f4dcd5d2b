/* SPDX-License-Identifier: Apache-2.0 */
/* The versioned-struct rule (vstruct.h). */
#include "vstruct.h"

#include <stdio.h>
#include <string.h>

bool clpin__vstruct_short(const char *arg, const char *type, size_t n, size_t min, char *buf,
                          size_t len) {
  if (n >= min)
    return false;
  snprintf(buf, len,
           "%s.struct_size is %zu, below the first released layout (%zu): set it to %s%s%s", arg, n,
           min, type ? "sizeof(" : "the struct's sizeof", type ? type : "", type ? ")" : "");
  return true;
}

void clpin__vstruct_out(void *dst, const void *src, size_t cur) {
  size_t n;
  memcpy(&n, dst, sizeof n);
  memcpy(dst, src, n < cur ? n : cur);
  if (n > cur)
    memset((char *)dst + cur, 0, n - cur);
  memcpy(dst, &n, sizeof n);
}
