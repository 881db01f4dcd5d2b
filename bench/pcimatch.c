/* SPDX-License-Identifier: Apache-2.0 */
/* PCI address matching for multigpu-bench (pcimatch.h). */
#include "pcimatch.h"

#include <stdio.h>
#include <string.h>

bool pci_known(const pci_addr *a) {
  return a->domain >= 0 && a->bus >= 0 && a->device >= 0 && a->function >= 0;
}

bool pci_equal(const pci_addr *a, const pci_addr *b) {
  return pci_known(a) && pci_known(b) && a->domain == b->domain && a->bus == b->bus &&
         a->device == b->device && a->function == b->function;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Exactly n hex digits at *s, advancing it; -1 if not. */
static long hex_field(const char **s, int n) {
  long v = 0;
  for (int i = 0; i < n; i++) {
    int d = hex_digit((*s)[i]);
    if (d < 0)
      return -1;
    v = v * 16 + d;
  }
  *s += n;
  return v;
}

bool pci_parse(const char *s, pci_addr *a) {
  *a = PCI_UNKNOWN;
  if (!s)
    return false;
  const char *colon = strchr(s, ':');
  if (!colon || (colon - s != 4 && colon - s != 8))
    return false;
  const char *p = s;
  long dom = hex_field(&p, (int)(colon - s));
  if (dom < 0 || *p++ != ':')
    return false;
  long bus = hex_field(&p, 2);
  if (bus < 0 || *p++ != ':')
    return false;
  long dev = hex_field(&p, 2);
  if (dev < 0 || dev > 0x1f || *p++ != '.')
    return false;
  long fn = hex_field(&p, 1);
  if (fn < 0 || fn > 7 || *p != '\0')
    return false;
  if (dom > 0xffff)
    return false;
  *a = (pci_addr){(int)dom, (int)bus, (int)dev, (int)fn};
  return true;
}

const char *pci_format(const pci_addr *a, char *buf, size_t len) {
  if (pci_known(a))
    snprintf(buf, len, "%04x:%02x:%02x.%x", (unsigned)a->domain, (unsigned)a->bus,
             (unsigned)a->device, (unsigned)a->function);
  else
    snprintf(buf, len, "unknown");
  return buf;
}

pci_addr pci_from_nv(unsigned domain, unsigned bus, unsigned slot) {
  return (pci_addr){(int)(domain & 0xffff), (int)(bus & 0xff), (int)((slot >> 3) & 0x1f),
                    (int)(slot & 7)};
}

/* Index of the first later element of v with the same known address as
 * some earlier one, or -1. */
static int first_duplicate(const pci_addr *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = 0; j < i; j++)
      if (pci_equal(&v[i], &v[j]))
        return i;
  return -1;
}

pci_match_status pci_match(const pci_addr *a, int na, const pci_addr *b, int nb, int *map,
                           int *dup_index, bool *dup_in_b) {
  for (int i = 0; i < na; i++)
    map[i] = -1;
  int da = first_duplicate(a, na), db = first_duplicate(b, nb);
  if (da >= 0 || db >= 0) {
    if (dup_index)
      *dup_index = da >= 0 ? da : db;
    if (dup_in_b)
      *dup_in_b = da < 0;
    return PCI_MATCH_DUPLICATE;
  }
  for (int i = 0; i < na; i++)
    for (int j = 0; j < nb && map[i] < 0; j++)
      if (pci_equal(&a[i], &b[j]))
        map[i] = j;
  return PCI_MATCH_OK;
}
