/* Bandwidth of a dot product of 20M doubles in C, in variants: 256-bit (AVX2)
   or 512-bit (AVX-512) loads, software prefetching some bytes ahead, two
   halves or eight chunks over OpenMP threads; min and median per variant, the
   variants timed in rounds. For comparing with NumPy's `np.dot` (OpenBLAS) and
   ours (`bench/ab/ab.c dot`) on a machine, pinned as bench/lent_machine.sh pins:

     gcc -O3 -march=native -fopenmp bench/ab/dotbw.c -o target/dotbw
     taskset -c 1,2 target/dotbw THREADS ROUNDS

   Session 45 (a lent Sapphire Rapids, two threads): AVX2 14.2 ms, AVX-512
   11.9 ms, NumPy 13.1 ms; prefetching changed nothing. The arrays are in huge
   pages (madvise), as NumPy's are. Needs AVX-512F to run. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#define N 20000000L
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("avx2,fma"))) static double dy(const double*a,const double*b,long lo,long hi,long pf){
  __m256d s0=_mm256_setzero_pd(),s1=s0,s2=s0,s3=s0; long i=lo;
  for(;i+16<=hi;i+=16){ if(pf){_mm_prefetch((const char*)(a+i)+pf,_MM_HINT_T0);_mm_prefetch((const char*)(b+i)+pf,_MM_HINT_T0);_mm_prefetch((const char*)(a+i)+pf+64,_MM_HINT_T0);_mm_prefetch((const char*)(b+i)+pf+64,_MM_HINT_T0);}
    s0=_mm256_fmadd_pd(_mm256_loadu_pd(a+i),_mm256_loadu_pd(b+i),s0);s1=_mm256_fmadd_pd(_mm256_loadu_pd(a+i+4),_mm256_loadu_pd(b+i+4),s1);
    s2=_mm256_fmadd_pd(_mm256_loadu_pd(a+i+8),_mm256_loadu_pd(b+i+8),s2);s3=_mm256_fmadd_pd(_mm256_loadu_pd(a+i+12),_mm256_loadu_pd(b+i+12),s3);}
  double r[4];_mm256_storeu_pd(r,_mm256_add_pd(_mm256_add_pd(s0,s1),_mm256_add_pd(s2,s3)));double s=r[0]+r[1]+r[2]+r[3];
  for(;i<hi;i++)s+=a[i]*b[i];return s;}
__attribute__((target("avx512f"))) static double dz(const double*a,const double*b,long lo,long hi,long pf){
  __m512d s0=_mm512_setzero_pd(),s1=s0,s2=s0,s3=s0; long i=lo;
  for(;i+32<=hi;i+=32){ if(pf){for(int c=0;c<4;c++){_mm_prefetch((const char*)(a+i)+pf+64*c,_MM_HINT_T0);_mm_prefetch((const char*)(b+i)+pf+64*c,_MM_HINT_T0);}}
    s0=_mm512_fmadd_pd(_mm512_loadu_pd(a+i),_mm512_loadu_pd(b+i),s0);s1=_mm512_fmadd_pd(_mm512_loadu_pd(a+i+8),_mm512_loadu_pd(b+i+8),s1);
    s2=_mm512_fmadd_pd(_mm512_loadu_pd(a+i+16),_mm512_loadu_pd(b+i+16),s2);s3=_mm512_fmadd_pd(_mm512_loadu_pd(a+i+24),_mm512_loadu_pd(b+i+24),s3);}
  double s=_mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(s0,s1),_mm512_add_pd(s2,s3)));
  for(;i<hi;i++)s+=a[i]*b[i];return s;}
typedef struct{const char*name;int z;long pf;int chunks;} V;
static double run(const V*v,const double*a,const double*b,int th){
  double tot=0; int C=v->chunks;
  #pragma omp parallel for num_threads(th) reduction(+:tot) schedule(static)
  for(int c=0;c<C;c++){long lo=N*c/C,hi=N*(c+1)/C; tot+= v->z?dz(a,b,lo,hi,v->pf):dy(a,b,lo,hi,v->pf);}
  return tot;}
static int cmp(const void*x,const void*y){double p=*(double*)x,q=*(double*)y;return p<q?-1:p>q;}
int main(int argc,char**argv){
  int th=argc>1?atoi(argv[1]):2, R=argc>2?atoi(argv[2]):15;
  double*a=aligned_alloc(1<<21,N*8),*b=aligned_alloc(1<<21,N*8);
  madvise(a,N*8,MADV_HUGEPAGE);madvise(b,N*8,MADV_HUGEPAGE);
  for(long i=0;i<N;i++){a[i]=(i%7)*0.5;b[i]=(i%5)*0.25;}
  V vs[]={{"ymm",0,0,2},{"ymm 8ch",0,0,8},{"ymm pf512",0,512,2},{"ymm pf1k",0,1024,2},{"ymm pf2k",0,2048,2},{"ymm pf4k",0,4096,2},
          {"zmm",1,0,2},{"zmm pf1k",1,1024,2},{"zmm pf2k",1,2048,2}};
  int nv=sizeof vs/sizeof*vs; double t[16][64]; double chk=0;
  for(int r=0;r<R;r++)for(int k=0;k<nv;k++){double t0=now();chk+=run(&vs[k],a,b,th);t[k][r]=now()-t0;}
  for(int k=0;k<nv;k++){qsort(t[k],R,8,cmp);printf("threads=%d %-10s min %6.2f med %6.2f ms\n",th,vs[k].name,t[k][0]*1e3,t[k][R/2]*1e3);}
  printf("chk %g\n",chk);return 0;}
