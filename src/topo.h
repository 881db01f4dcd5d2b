/* SPDX-License-Identifier: Apache-2.0 */
/* The host's topology as clpin sees it (topo.c): NUMA nodes, their CPUs,
 * and the node of an OpenCL device. Internal.
 *
 * Everything is read through one seam, a sysfs root ("/sys" unless a test
 * points it at a made-up tree with clpin__topo_test_hook), so a test can
 * lay out two nodes and four devices on a one-node machine. */
#ifndef CLPIN_TOPO_H
#define CLPIN_TOPO_H

#include "internal.h"

#include <sched.h>

/* Online NUMA nodes (<root>/devices/system/node/online); 1 when unknown. */
int clpin__topo_node_count(void);

/* The host's one online node when exactly one is online (read from sysfs),
 * else -1 (several, or none readable). */
int clpin__topo_only_node(void);

/* The NUMA node of dev, or -1. *why (why_len bytes) says how it was found
 * or why not: the PCI address and the query that gave it, then sysfs's
 * numa_node. Makes OpenCL queries (no lock held). */
int clpin__topo_device_node(cl_device_id dev, char *why, size_t why_len);

/* The CPUs of node (<root>/devices/system/node/nodeN/cpulist). False when
 * they cannot be read or none is listed. */
bool clpin__topo_node_cpus(int node, cpu_set_t *cpus);

/* Pinned memory of nbytes (page-rounded) mapped by clpin and bound to node
 * with mbind (MPOL_BIND), no libnuma: NULL when the kernel refuses (no
 * such node, no NUMA support), with errno kept. Free with munmap. */
void *clpin__topo_map_on_node(size_t nbytes, int node);

/* Test seam: a sysfs root to read instead of "/sys" (NULL: back to /sys),
 * and PCI addresses ("0000:01:00.0") for devices that report none (POCL's
 * CPU devices), n of them (0: none). The strings are copied. */
void clpin__topo_test_hook(const char *sysfs_root, cl_uint n, const cl_device_id *devices,
                           const char *const *pci);

#endif /* CLPIN_TOPO_H */
