/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA baseline of clpin-bench: cudaMemcpy from cudaHostAlloc (pinned)
 * and from malloc (pageable) memory, measured in the same process as the
 * OpenCL paths. The CUDA runtime is loaded with dlopen when the bench runs,
 * so clpin-bench builds and runs where CUDA is absent (the CPU device in
 * CI); then the CUDA columns are simply empty. */
#ifndef CLPIN_CUDAREF_H
#define CLPIN_CUDAREF_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { CUDAREF_H2D = 1, CUDAREF_D2H = 2 } cudaref_dir; /* cudaMemcpyKind values */

/* Load libcudart only (CLPIN_BENCH_CUDART names the file; else the usual
 * sonames) and its common entry points (those below): the soname opened, or
 * NULL when none loads or it lacks one of them. Benches that call
 * other entry points (streams, attributes) take them with cudaref_symbol. */
const char *cudaref_load(void);
/* Set *fn_ptr (a pointer to a function pointer) to the runtime's entry point
 * name, NULL when absent or nothing is loaded. */
void cudaref_symbol(void *fn_ptr, const char *name);

/* cudaref_load, then select device. False, with a reason in why, when it
 * cannot. */
bool cudaref_open(int device, char *why, size_t why_len);
/* The CUDA device's name ("" when unknown). */
const char *cudaref_device_name(void);
/* Which libcudart was loaded and its runtime version, e.g.
 * "libcudart.so.13, runtime 13.0" ("" before cudaref_open succeeds). */
const char *cudaref_library(void);

bool cudaref_set_device(int device);                      /* cudaSetDevice for the calling thread */
void *cudaref_host_alloc(size_t n);                       /* cudaHostAlloc, NULL on failure */
void *cudaref_host_alloc_flags(size_t n, unsigned flags); /* with cudaHostAlloc's flags */
void cudaref_host_free(void *p);
void *cudaref_dev_alloc(size_t n); /* cudaMalloc, NULL on failure */
void cudaref_dev_free(void *p);
/* Synchronous cudaMemcpy between host and dev; false (and a message on
 * stderr) on a CUDA error. */
bool cudaref_copy(void *host, void *dev, size_t n, cudaref_dir dir);

#endif
