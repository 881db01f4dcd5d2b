/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file clpin_mpi_errors.h
 * @brief libclpin-mpi's error codes: its sub-range of clpin's reserved range.
 *
 * clpin's codes lie in -20000 ... -20099; each add-on that has codes of its
 * own defines them in a header of its own like this one, an X-macro table
 * and nothing else (no MPI, no other include), so that clpin.h includes it
 * and clpin_strerror() names its codes whether or not the add-on is loaded
 * (docs/DESIGN.md, "Error codes"). It is the one part of an add-on the core
 * reads. Installed with clpin.h; a program includes clpin.h or clpin_mpi.h,
 * never this header alone.
 *
 * libclpin-mpi's codes are -20022 ... -20024, given before the range was
 * divided (their values never change); a new one would take -20060 ...
 * -20069, kept for it.
 */
#ifndef CLPIN_MPI_ERRORS_H
#define CLPIN_MPI_ERRORS_H

/** libclpin-mpi's codes: X(name, value, description), as ::CLPIN_ERROR_TABLE
 *  (clpin_strerror() and ::clpin_mpi_error are generated from it). */
#define CLPIN_MPI_ERROR_TABLE(X)                                                                   \
  X(CLPIN_ERR_MPI, -20022,                                                                         \
    "an MPI call failed (libclpin-mpi; clpin_mpi_last_error_detail holds MPI's text)")             \
  X(CLPIN_ERR_MISMATCH, -20023,                                                                    \
    "ranks disagree: the sender's and receiver's sizes, or a collective's arguments, differ")      \
  X(CLPIN_ERR_PEER, -20024,                                                                        \
    "another rank refused its arguments or failed, so this collective call did nothing")

/** The first (highest) code of libclpin-mpi's sub-range. */
#define CLPIN_MPI_ERR_FIRST (-20022)
/** The last (lowest) code of libclpin-mpi's sub-range. */
#define CLPIN_MPI_ERR_LAST (-20024)

#define CLPIN__MPI_ERR_ENUM(name, value, text) name = value, /**< text */
/** libclpin-mpi's error codes (see ::CLPIN_MPI_ERROR_TABLE). */
enum clpin_mpi_error {
  CLPIN_MPI_ERROR_TABLE(CLPIN__MPI_ERR_ENUM) CLPIN_MPI_ERR__END = CLPIN_MPI_ERR_LAST /**< end */
};
#undef CLPIN__MPI_ERR_ENUM

#endif /* CLPIN_MPI_ERRORS_H */
