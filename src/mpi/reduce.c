/* SPDX-License-Identifier: Apache-2.0 */
/* The host reductions of allreduce: four types by three ops, element-wise
 * dst = op(dst, src). Plain loops the compiler vectorises. */
#include "mpi_internal.h"

clpin__mpi_rtype clpin__mpi_rtype_of(MPI_Datatype t) {
  if (t == MPI_FLOAT)
    return RT_FLOAT;
  if (t == MPI_DOUBLE)
    return RT_DOUBLE;
  if (t == MPI_INT)
    return RT_INT;
  if (t == MPI_LONG_LONG || t == MPI_LONG_LONG_INT)
    return RT_LLONG;
  return RT__BAD;
}

clpin__mpi_rop clpin__mpi_rop_of(MPI_Op op) {
  if (op == MPI_SUM)
    return RO_SUM;
  if (op == MPI_MAX)
    return RO_MAX;
  if (op == MPI_MIN)
    return RO_MIN;
  return RO__BAD;
}

size_t clpin__mpi_rtype_size(clpin__mpi_rtype t) {
  switch (t) {
  case RT_FLOAT: return sizeof(float);
  case RT_DOUBLE: return sizeof(double);
  case RT_INT: return sizeof(int);
  case RT_LLONG: return sizeof(long long);
  default: return 0;
  }
}

/* Integer sums wrap (two's complement), as MPI implementations do: summed
 * as unsigned, so the wrap is defined behaviour. */
#define REDUCE_LOOPS(T, U)                                                                         \
  static void sum_##T(T *restrict d, const T *restrict s, size_t n) {                              \
    for (size_t i = 0; i < n; i++)                                                                 \
      d[i] = (T)((U)d[i] + (U)s[i]);                                                               \
  }                                                                                                \
  static void max_##T(T *restrict d, const T *restrict s, size_t n) {                              \
    for (size_t i = 0; i < n; i++)                                                                 \
      d[i] = s[i] > d[i] ? s[i] : d[i];                                                            \
  }                                                                                                \
  static void min_##T(T *restrict d, const T *restrict s, size_t n) {                              \
    for (size_t i = 0; i < n; i++)                                                                 \
      d[i] = s[i] < d[i] ? s[i] : d[i];                                                            \
  }

typedef long long llong;
REDUCE_LOOPS(float, float)
REDUCE_LOOPS(double, double)
REDUCE_LOOPS(int, unsigned)
REDUCE_LOOPS(llong, unsigned long long)

void clpin__mpi_reduce(clpin__mpi_rtype t, clpin__mpi_rop op, void *dst, const void *src,
                       size_t n) {
#define CASE(T)                                                                                    \
  if (op == RO_SUM)                                                                                \
    sum_##T(dst, src, n);                                                                          \
  else if (op == RO_MAX)                                                                           \
    max_##T(dst, src, n);                                                                          \
  else                                                                                             \
    min_##T(dst, src, n);                                                                          \
  return;
  switch (t) {
  case RT_FLOAT: CASE(float)
  case RT_DOUBLE: CASE(double)
  case RT_INT: CASE(int)
  case RT_LLONG: CASE(llong)
  default: return;
  }
#undef CASE
}
