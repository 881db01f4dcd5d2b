/* SPDX-License-Identifier: Apache-2.0 */
/* Round 16 experiment (dropped): host-only ping-pong at sizes about the eager limit and the plain path bound. mpicc -O2; mpirun -np 2. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int c, char**v){ MPI_Init(&c,&v); int r; MPI_Comm_rank(MPI_COMM_WORLD,&r); char b[70000]; int N=20000;
int sizes[]={4096,4097,4400,16384,16448,65536,65537};
for(int rep=0;rep<3;rep++) for(int k=0;k<7;k++){ int n=sizes[k]; MPI_Barrier(MPI_COMM_WORLD); double t0=MPI_Wtime();
for(int i=0;i<N;i++){ if(r==0){MPI_Send(b,n,MPI_BYTE,1,1,MPI_COMM_WORLD);MPI_Recv(b,n,MPI_BYTE,1,1,MPI_COMM_WORLD,MPI_STATUS_IGNORE);} else {MPI_Recv(b,n,MPI_BYTE,0,1,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(b,n,MPI_BYTE,0,1,MPI_COMM_WORLD);} }
if(r==0) printf("%6d bytes: %.2f us one-way\n", n, (MPI_Wtime()-t0)/N/2*1e6);}
MPI_Finalize();}
