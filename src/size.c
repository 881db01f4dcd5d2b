/* SPDX-License-Identifier: Apache-2.0 */
/* Size options' parser (size.h). */
#include "size.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

bool clpin__parse_size(const char *text, size_t *out) {
  if (!text)
    return false;
  while (isspace((unsigned char)*text))
    text++;
  if (!isdigit((unsigned char)*text))
    return false; /* also rejects a sign */
  errno = 0;
  char *end;
  unsigned long long n = strtoull(text, &end, 10);
  if (errno == ERANGE)
    return false;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 'K':
    shift = 10;
    end++;
    break;
  case 'M':
    shift = 20;
    end++;
    break;
  case 'G':
    shift = 30;
    end++;
    break;
  case 'T':
    shift = 40;
    end++;
    break;
  default: break;
  }
  if (shift && (*end == 'i' || *end == 'I'))
    end++;
  if (*end == 'b' || *end == 'B')
    end++;
  while (isspace((unsigned char)*end))
    end++;
  if (*end != '\0')
    return false;
  if (shift && n > (SIZE_MAX >> shift))
    return false;
  if (n > SIZE_MAX)
    return false;
  *out = (size_t)n << shift;
  return true;
}

const char *clpin__size_option(const char *text, size_t min, size_t max, size_t *out) {
  size_t v;
  if (!clpin__parse_size(text, &v))
    return "not a size";
  if (v < min)
    return "below the minimum size";
  if (v > max)
    return "out of range";
  *out = v;
  return NULL;
}
