/* SPDX-License-Identifier: Apache-2.0 */
/* The host's topology: NUMA nodes, their CPUs, and each OpenCL device's
 * node, read from sysfs through one root a test can move (topo.h).
 *
 * A device's node comes from its PCI address: cl_khr_pci_bus_info first
 * (the standard query), then NVIDIA's CL_DEVICE_PCI_BUS_ID_NV/_SLOT_ID_NV,
 * then AMD's CL_DEVICE_TOPOLOGY_AMD; sysfs then names the node
 * (<root>/bus/pci/devices/DDDD:BB:DD.F/numa_node, -1 when the firmware
 * gives none). */
#include "topo.h"

#include <CL/cl_ext.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CL_DEVICE_PCI_BUS_INFO_KHR
#define CL_DEVICE_PCI_BUS_INFO_KHR 0x410F
#endif
#ifndef CL_DEVICE_PCI_BUS_ID_NV
#define CL_DEVICE_PCI_BUS_ID_NV 0x4008
#endif
#ifndef CL_DEVICE_PCI_SLOT_ID_NV
#define CL_DEVICE_PCI_SLOT_ID_NV 0x4009
#endif
#ifndef CL_DEVICE_PCI_DOMAIN_ID_NV
#define CL_DEVICE_PCI_DOMAIN_ID_NV 0x400A
#endif
#ifndef CL_DEVICE_TOPOLOGY_AMD
#define CL_DEVICE_TOPOLOGY_AMD 0x4037
#endif
#define TOPOLOGY_TYPE_PCIE_AMD 1
/* The kernel's memory policy constants (linux/mempolicy.h), so no libnuma
 * or numaif.h is needed. */
#define MPOL_BIND_ 2
#define MAX_NODES 1024

/* ---- the seam -------------------------------------------------------------- */

#define MAX_FAKE 16
static struct {
  pthread_mutex_t mu;
  char root[256];
  cl_uint nfake;
  cl_device_id fake_dev[MAX_FAKE];
  char fake_pci[MAX_FAKE][16];
} T = {.mu = PTHREAD_MUTEX_INITIALIZER, .root = "/sys"};

void clpin__topo_test_hook(const char *sysfs_root, cl_uint n, const cl_device_id *devices,
                           const char *const *pci) {
  pthread_mutex_lock(&T.mu);
  snprintf(T.root, sizeof T.root, "%s", sysfs_root ? sysfs_root : "/sys");
  T.nfake = n < MAX_FAKE ? n : MAX_FAKE;
  for (cl_uint i = 0; i < T.nfake; i++) {
    T.fake_dev[i] = devices[i];
    snprintf(T.fake_pci[i], sizeof T.fake_pci[i], "%s", pci[i]);
  }
  pthread_mutex_unlock(&T.mu);
}

/* Read <root>/<rel> into buf (first line, newline cut). */
static bool read_sys(const char *rel, char *buf, size_t len) {
  char path[512];
  pthread_mutex_lock(&T.mu);
  snprintf(path, sizeof path, "%s/%s", T.root, rel);
  pthread_mutex_unlock(&T.mu);
  FILE *f = fopen(path, "re");
  if (!f)
    return false;
  bool ok = fgets(buf, (int)len, f) != NULL;
  fclose(f);
  if (ok)
    buf[strcspn(buf, "\n")] = '\0';
  return ok;
}

/* Parse a kernel list such as "0-3,8,10-11"; fn(arg, i) for each member.
 * False on a malformed list. */
static bool parse_list(const char *s, void (*fn)(void *, long), void *arg) {
  while (*s) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s || a < 0)
      return false;
    s = end;
    if (*s == '-') {
      b = strtol(s + 1, &end, 10);
      if (end == s + 1 || b < a)
        return false;
      s = end;
    }
    for (long i = a; i <= b && i < MAX_NODES * 64; i++)
      fn(arg, i);
    if (*s == ',')
      s++;
    else if (*s)
      return false;
  }
  return true;
}

static void count_one(void *arg, long i) {
  (void)i;
  (*(int *)arg)++;
}

int clpin__topo_node_count(void) {
  char buf[256];
  int n = 0;
  if (!read_sys("devices/system/node/online", buf, sizeof buf) || !parse_list(buf, count_one, &n))
    return 1;
  return n > 0 ? n : 1;
}

/* parse_list callback: the first member into arg[0], the count into arg[1]. */
static void first_and_count(void *arg, long i) {
  long *a = arg;
  if (a[1]++ == 0)
    a[0] = i;
}

int clpin__topo_only_node(void) {
  char buf[256];
  long a[2] = {-1, 0};
  if (!read_sys("devices/system/node/online", buf, sizeof buf) ||
      !parse_list(buf, first_and_count, a) || a[1] != 1 || a[0] >= MAX_NODES)
    return -1;
  return (int)a[0];
}

static void add_cpu(void *arg, long i) {
  if (i < CPU_SETSIZE)
    CPU_SET((int)i, (cpu_set_t *)arg);
}

bool clpin__topo_node_cpus(int node, cpu_set_t *cpus) {
  char rel[64], buf[1024];
  CPU_ZERO(cpus);
  snprintf(rel, sizeof rel, "devices/system/node/node%d/cpulist", node);
  if (node < 0 || !read_sys(rel, buf, sizeof buf) || !parse_list(buf, add_cpu, cpus))
    return false;
  return CPU_COUNT(cpus) > 0;
}

/* ---- a device's PCI address -------------------------------------------------- */

static bool has_extension(cl_device_id dev, const char *name) {
  size_t n = 0;
  if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0)
    return false;
  char *ext = malloc(n + 1);
  if (!ext)
    return false;
  bool found = false;
  if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, ext, NULL) == CL_SUCCESS) {
    ext[n] = '\0';
    size_t len = strlen(name);
    for (const char *p = ext; (p = strstr(p, name)) != NULL; p += len)
      if ((p == ext || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0')) {
        found = true;
        break;
      }
  }
  free(ext);
  return found;
}

/* The device's PCI address as sysfs names it, and which query gave it. */
static bool device_pci(cl_device_id dev, char *pci, size_t len, const char **how) {
  pthread_mutex_lock(&T.mu);
  for (cl_uint i = 0; i < T.nfake; i++)
    if (T.fake_dev[i] == dev) {
      snprintf(pci, len, "%s", T.fake_pci[i]);
      pthread_mutex_unlock(&T.mu);
      *how = "the test hook";
      return true;
    }
  pthread_mutex_unlock(&T.mu);
  if (has_extension(dev, "cl_khr_pci_bus_info")) {
    cl_device_pci_bus_info_khr info;
    if (clGetDeviceInfo(dev, CL_DEVICE_PCI_BUS_INFO_KHR, sizeof info, &info, NULL) == CL_SUCCESS) {
      snprintf(pci, len, "%04x:%02x:%02x.%x", info.pci_domain, info.pci_bus, info.pci_device,
               info.pci_function);
      *how = "cl_khr_pci_bus_info";
      return true;
    }
  }
  if (has_extension(dev, "cl_nv_device_attribute_query")) {
    cl_uint bus = 0, slot = 0, domain = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_PCI_BUS_ID_NV, sizeof bus, &bus, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(dev, CL_DEVICE_PCI_SLOT_ID_NV, sizeof slot, &slot, NULL) == CL_SUCCESS) {
      /* The domain query is newer; domain 0 where it is missing. */
      if (clGetDeviceInfo(dev, CL_DEVICE_PCI_DOMAIN_ID_NV, sizeof domain, &domain, NULL) !=
          CL_SUCCESS)
        domain = 0;
      /* NVIDIA's slot id is device << 3 | function. */
      snprintf(pci, len, "%04x:%02x:%02x.%x", domain, bus, slot >> 3, slot & 7);
      *how = "CL_DEVICE_PCI_BUS_ID_NV/CL_DEVICE_PCI_SLOT_ID_NV";
      return true;
    }
  }
  if (has_extension(dev, "cl_amd_device_attribute_query")) {
    /* cl_device_topology_amd's PCIe layout: a type word, 17 unused bytes,
     * then bus, device, function. */
    unsigned char raw[24];
    memset(raw, 0, sizeof raw);
    cl_uint type;
    if (clGetDeviceInfo(dev, CL_DEVICE_TOPOLOGY_AMD, sizeof raw, raw, NULL) == CL_SUCCESS) {
      memcpy(&type, raw, sizeof type);
      if (type == TOPOLOGY_TYPE_PCIE_AMD) {
        snprintf(pci, len, "0000:%02x:%02x.%x", raw[21], raw[22], raw[23]);
        *how = "CL_DEVICE_TOPOLOGY_AMD";
        return true;
      }
    }
  }
  return false;
}

int clpin__topo_device_node(cl_device_id dev, char *why, size_t why_len) {
  char pci[32], rel[96], buf[32];
  const char *how = "";
  if (!device_pci(dev, pci, sizeof pci, &how)) {
    snprintf(why, why_len,
             "no PCI address (no answer to cl_khr_pci_bus_info, the NV or the AMD query)");
    return -1;
  }
  snprintf(rel, sizeof rel, "bus/pci/devices/%s/numa_node", pci);
  if (!read_sys(rel, buf, sizeof buf)) {
    snprintf(why, why_len, "PCI %s (%s), but no readable sysfs numa_node", pci, how);
    return -1;
  }
  char *end;
  long node = strtol(buf, &end, 10);
  if (end == buf || node < 0 || node >= MAX_NODES) {
    snprintf(why, why_len, "PCI %s (%s): sysfs numa_node is %s (none given)", pci, how, buf);
    return -1;
  }
  snprintf(why, why_len, "PCI %s (%s), sysfs numa_node %ld", pci, how, node);
  return (int)node;
}

/* ---- placement ---------------------------------------------------------------- */

void *clpin__topo_map_on_node(size_t nbytes, int node) {
  if (node < 0 || node >= MAX_NODES) {
    errno = EINVAL;
    return NULL;
  }
  void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  unsigned long mask[MAX_NODES / (8 * sizeof(unsigned long))];
  memset(mask, 0, sizeof mask);
  mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
  /* The policy sits on the mapping, so the node holds whichever thread
   * (a copy thread, the driver) first touches a page. */
  if (syscall(SYS_mbind, p, nbytes, MPOL_BIND_, mask, (unsigned long)MAX_NODES + 1, 0ul) != 0) {
    int e = errno;
    munmap(p, nbytes);
    errno = e;
    return NULL;
  }
  return p;
}
