/* SPDX-License-Identifier: Apache-2.0 */
/* The order of the collectives on one communicator: each call, blocking or
 * a request, takes a ticket on comm when it is made and runs when its turn
 * comes, so a rank's collectives on comm run in the order its calls were
 * made (MPI wants the same order on every rank). Below the collectives
 * (allreduce.c, bcast.c) and the requests (request.c), which all take
 * turns; it calls none of them. */
#include "mpi_internal.h"

#include <pthread.h>
#include <stdlib.h>

struct clpin__mpi_turn {
  MPI_Comm comm;
  uint64_t next, serving; /* tickets given, and the one that may run */
  int users;              /* tickets not yet ended */
  struct clpin__mpi_turn *link;
};
static pthread_mutex_t turn_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cv = PTHREAD_COND_INITIALIZER;
static clpin__mpi_turn *turns; /* the communicators with a ticket out */

clpin__mpi_turn *clpin__mpi_turn_ticket(MPI_Comm comm, uint64_t *ticket) {
  pthread_mutex_lock(&turn_mu);
  clpin__mpi_turn *t = turns;
  while (t && t->comm != comm)
    t = t->link;
  if (!t && (t = calloc(1, sizeof *t)) != NULL) {
    t->comm = comm;
    t->link = turns;
    turns = t;
  }
  if (t) {
    *ticket = t->next++;
    t->users++;
  }
  pthread_mutex_unlock(&turn_mu);
  return t;
}

void clpin__mpi_turn_wait(clpin__mpi_turn *t, uint64_t ticket) {
  if (!t)
    return;
  pthread_mutex_lock(&turn_mu);
  while (t->serving != ticket)
    pthread_cond_wait(&turn_cv, &turn_mu);
  pthread_mutex_unlock(&turn_mu);
}

clpin__mpi_turn *clpin__mpi_turn_take(MPI_Comm comm) {
  uint64_t ticket = 0;
  clpin__mpi_turn *t = clpin__mpi_turn_ticket(comm, &ticket);
  clpin__mpi_turn_wait(t, ticket);
  return t;
}

void clpin__mpi_turn_end(clpin__mpi_turn *t) {
  if (!t)
    return;
  pthread_mutex_lock(&turn_mu);
  t->serving++;
  if (--t->users == 0) { /* nothing pending on comm: forget it */
    for (clpin__mpi_turn **at = &turns; *at; at = &(*at)->link)
      if (*at == t) {
        *at = t->link;
        break;
      }
    free(t);
  }
  pthread_cond_broadcast(&turn_cv);
  pthread_mutex_unlock(&turn_mu);
}
