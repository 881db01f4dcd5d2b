/* SPDX-License-Identifier: Apache-2.0 */
/* Host-unified devices: which memory a device uses in place, per vendor
 * (unified.c). The rule table and the decision are pure functions of strings,
 * flags and a pointer/size, so tests check every vendor without its device. */
#ifndef CLPIN_UNIFIED_H
#define CLPIN_UNIFIED_H

#include "internal.h"

/* How a buffer over some memory is made on a device. */
typedef enum {
  CLPIN__ZC_COPY,      /* no zero copy known: the classic path (a buffer, copies) */
  CLPIN__ZC_ALLOC_MAP, /* CL_MEM_ALLOC_HOST_PTR, host access through map/unmap */
  CLPIN__ZC_USE_HOST   /* CL_MEM_USE_HOST_PTR over the memory, host access through map/unmap */
} clpin__zc_how;

/* Whose memory a buffer is wanted for. */
typedef enum {
  CLPIN__ZC_OWN,   /* memory clpin allocates (a tensor's) */
  CLPIN__ZC_CALLER /* the caller's memory (CLPIN_ZERO_COPY) */
} clpin__zc_whose;

/* One vendor's rule (docs/ZERO_COPY.md cites each vendor's guide). */
typedef struct {
  const char *name;     /* "pocl", "intel", ... ("unknown" for no match) */
  const char *platform; /* substring of CL_PLATFORM_NAME (case-insensitive), or NULL */
  const char *device;   /* substring of CL_DEVICE_NAME or CL_DEVICE_VENDOR, or NULL */
  clpin__zc_how own;    /* for clpin's own memory */
  clpin__zc_how caller; /* for the caller's memory, when align/size_multiple hold */
  size_t align;         /* pointer alignment; 0: the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN */
  size_t size_multiple; /* the buffer's size must be a multiple of this */
} clpin__zc_rule;

/* The rule for a device given its platform name, device name and vendor;
 * never NULL (the "unknown" rule when none matches). */
const clpin__zc_rule *clpin__zc_rule_for(const char *platform, const char *device_name,
                                         const char *device_vendor);
/* The rules, in match order, ending with "unknown"; *n set to their count. */
const clpin__zc_rule *clpin__zc_rules(size_t *n);
/* The decision: how a buffer over [ptr, ptr + nbytes) (ptr NULL for OWN) is
 * made on a device with this rule. Not host-unified: always COPY. */
clpin__zc_how clpin__zc_decide(const clpin__zc_rule *rule, bool unified, clpin__zc_whose whose,
                               const void *ptr, size_t nbytes, size_t base_align);

/* What the decision needs about the device of a queue (OpenCL queries). A
 * host-unified device no rule names is probed once, on a queue of its own
 * (rules "probed-use-host", "probed-alloc-map", else "unknown"). The test
 * seam CLPIN__TEST_UNIFIED=<rule name> makes every device host-unified
 * with that rule (Oclgrind runs the zero-copy paths this way: they are
 * correct OpenCL on any device); CLPIN__TEST_UNIFIED=probe makes it
 * host-unified and probed, whatever its name. */
typedef struct {
  const clpin__zc_rule *rule;
  bool unified;
  size_t base_align; /* bytes */
} clpin__zc_device;
cl_int clpin__zc_probe(cl_command_queue q, clpin__zc_device *out);

/* Page-aligned host memory for USE_HOST_PTR buffers of clpin's own, from a
 * small cache of freed regions (a fresh region costs its page faults on
 * every first touch). The buffer returns the memory itself when the driver
 * destroys it (a destructor callback), so no command can still use it. */
cl_mem clpin__zc_own_buffer(cl_context ctx, size_t nbytes, size_t size_multiple, const void *fill,
                            cl_int *err);

#endif /* CLPIN_UNIFIED_H */
