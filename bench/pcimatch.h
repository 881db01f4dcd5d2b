/* SPDX-License-Identifier: Apache-2.0 */
/* Matching OpenCL devices to CUDA devices by PCI address (multigpu-bench's CUDA
 * baseline). Pure functions, no OpenCL or CUDA: tests/check_pcimatch.c
 * feeds them made-up device lists. */
#ifndef CLPIN_PCIMATCH_H
#define CLPIN_PCIMATCH_H

#include <stdbool.h>
#include <stddef.h>

/* A PCI address; a device whose address is unknown has domain -1. */
typedef struct {
  int domain, bus, device, function;
} pci_addr;

#define PCI_UNKNOWN ((pci_addr){-1, -1, -1, -1})

bool pci_known(const pci_addr *a);
bool pci_equal(const pci_addr *a, const pci_addr *b);

/* "dddd:bb:dd.f", the domain of 4 or 8 hex digits (CUDA's
 * cudaDeviceGetPCIBusId writes either; sysfs writes 4); false (and *a
 * unknown) on anything else. */
bool pci_parse(const char *s, pci_addr *a);
/* "dddd:bb:dd.f", or "unknown"; returns buf. */
const char *pci_format(const pci_addr *a, char *buf, size_t len);
/* NVIDIA's OpenCL queries: CL_DEVICE_PCI_BUS_ID_NV, CL_DEVICE_PCI_SLOT_ID_NV
 * (device << 3 | function) and CL_DEVICE_PCI_DOMAIN_ID_NV (0 where the
 * driver does not answer it). */
pci_addr pci_from_nv(unsigned domain, unsigned bus, unsigned slot);

/* The outcome of pci_match. */
typedef enum {
  PCI_MATCH_OK = 0,    /* map filled; unmatched devices are -1 */
  PCI_MATCH_DUPLICATE, /* one address twice in a list: nothing matched */
} pci_match_status;

/* map[i] := the index j of b whose address equals a[i] in domain, bus,
 * device and function, or -1 when a[i] is unknown or no device of b has it.
 * The two lists may be in any order. An address that appears twice in a or
 * twice in b makes the whole match ambiguous: every map[i] is -1 and
 * PCI_MATCH_DUPLICATE is returned (*dup_index, if not NULL, is the index of
 * the second occurrence; *dup_in_b says in which list). */
pci_match_status pci_match(const pci_addr *a, int na, const pci_addr *b, int nb, int *map,
                           int *dup_index, bool *dup_in_b);

#endif
