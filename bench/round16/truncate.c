/* SPDX-License-Identifier: Apache-2.0 */
/* Round 16 experiment (dropped): MPI_Recv of larger messages into a 16 KiB + 1 buffer under MPI_ERRORS_RETURN. Open MPI 4.1 writes past the buffer; MPICH returns MPI_ERR_TRUNCATE cleanly. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int c, char**v){ int p; MPI_Init_thread(&c,&v,MPI_THREAD_MULTIPLE,&p); int r; MPI_Comm_rank(MPI_COMM_WORLD,&r);
MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
static char big[8<<20]; char small[16385]; int sizes[]={16386, 65536, 1<<20, 8<<20};
for(int k=0;k<4;k++){ int n=sizes[k];
 if(r==0){ memset(big,k+1,n); int e=MPI_Send(big,n,MPI_BYTE,1,5,MPI_COMM_WORLD); printf("send %d: rc %d\n",n,e); fflush(stdout);
   int e2=MPI_Send(big,100,MPI_BYTE,1,5,MPI_COMM_WORLD); printf("follow-up send rc %d\n",e2);}
 else { MPI_Status st; int e=MPI_Recv(small,sizeof small,MPI_BYTE,0,5,MPI_COMM_WORLD,&st); int cls=-1; MPI_Error_class(e,&cls); int cnt=-1; MPI_Get_count(&st,MPI_BYTE,&cnt);
   printf("recv of %d into %zu: rc %d class %d (TRUNCATE=%d) count %d byte0 %d\n",n,sizeof small,e,cls,MPI_ERR_TRUNCATE,cnt,small[0]);
   e=MPI_Recv(small,sizeof small,MPI_BYTE,0,5,MPI_COMM_WORLD,&st); MPI_Get_count(&st,MPI_BYTE,&cnt); printf("follow-up recv rc %d count %d\n",e,cnt); fflush(stdout);}
 MPI_Barrier(MPI_COMM_WORLD);}
if(r==0)printf("done\n"); MPI_Finalize();}
