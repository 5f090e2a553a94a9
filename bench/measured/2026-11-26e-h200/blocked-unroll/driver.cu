// Register-blocked matmul leaves, unrolled by 4 or not (issue 27.5): median of 7 timed runs.
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
typedef cudaError_t (*launch_fn)(int, int, int, int, const float *, const float *, float *, cudaStream_t);
typedef cudaError_t (*attr_fn)(cudaFuncAttributes *);
typedef cudaError_t (*allow_fn)(size_t);
#define LEAF(N) extern "C" cudaError_t metafork_launch_matmul_leaf##N(int, int, int, int, const float *, const float *, float *, cudaStream_t); \
  extern "C" cudaError_t metafork_attributes_matmul_leaf##N(cudaFuncAttributes *); extern "C" cudaError_t metafork_allow_shared_matmul_leaf##N(size_t);
LEAF(11) LEAF(12) LEAF(43) LEAF(44)
struct K { const char *name; int s; launch_fn launch; attr_fn attr; allow_fn allow; };
#define ENTRY(N, S, NAME) {NAME, S, metafork_launch_matmul_leaf##N, metafork_attributes_matmul_leaf##N, metafork_allow_shared_matmul_leaf##N}
__global__ void reference(int n, const float *a, const float *b, float *c) {
  int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || j >= n) return;
  double s = 0;
  for (int k = 0; k < n; k++) s += (double)a[i * n + k] * b[k * n + j];
  c[i * n + j] = (float)s;
}
int main() {
  K ks[] = {ENTRY(11, 8, "8x8 unrolled (leaf11)"), ENTRY(12, 8, "8x8 (leaf12)"), ENTRY(43, 4, "4x4 unrolled (leaf43)"), ENTRY(44, 4, "4x4 (leaf44)")};
  cudaDeviceProp prop; cudaGetDeviceProperties(&prop, 0);
  printf("device %s\n", prop.name);
  for (K &k : ks) { cudaFuncAttributes a; k.attr(&a); k.allow(prop.sharedMemPerBlockOptin); printf("%s: %d registers, %zu static shared, %zu local\n", k.name, a.numRegs, a.sharedSizeBytes, a.localSizeBytes); }
  for (int n : {2048, 4096}) {
    size_t e = (size_t)n * n;
    std::vector<float> h(e);
    unsigned long long st = 12345;
    for (auto &x : h) { st = st * 6364136223846793005ULL + 1442695040888963407ULL; x = (float)((st >> 40) & 0xffff) / 65536.0f - 0.5f; }
    float *a, *b, *c, *r;
    cudaMalloc(&a, e * 4); cudaMalloc(&b, e * 4); cudaMalloc(&c, e * 4); cudaMalloc(&r, e * 4);
    cudaMemcpy(a, h.data(), e * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, h.data(), e * 4, cudaMemcpyHostToDevice);
    reference<<<dim3(n / 16, n / 16), dim3(16, 16)>>>(n, a, b, r);
    std::vector<float> ref(e), got(e);
    cudaMemcpy(ref.data(), r, e * 4, cudaMemcpyDeviceToHost);
    cudaEvent_t t0, t1; cudaEventCreate(&t0); cudaEventCreate(&t1);
    for (K &k : ks)
      for (int B0 : {16, 32, 64, 128})
        for (int ub1 : {4, 8, 16, 32, 64}) {
          int s = k.s;
          if (B0 % 8 || B0 > ub1 * s || n % B0 || n % (ub1 * s)) continue;
          long threads = (long)ub1 * (B0 / (s == 8 ? 8 : 4));
          if (threads > 1024 || threads < 32) continue;
          cudaMemset(c, 0, e * 4);
          cudaError_t err = k.launch(n, B0, ub1, s, a, b, c, 0);
          if (err == cudaSuccess) err = cudaDeviceSynchronize();
          if (err != cudaSuccess) { printf("n=%d %s B0=%d ub1=%d threads=%ld: %s\n", n, k.name, B0, ub1, threads, cudaGetErrorString(err)); cudaGetLastError(); continue; }
          cudaMemcpy(got.data(), c, e * 4, cudaMemcpyDeviceToHost);
          double worst = 0;
          for (size_t i = 0; i < e; i++) worst = std::max(worst, (double)fabs(got[i] - ref[i]) / std::max(1.0, (double)fabs(ref[i])));
          std::vector<float> ms;
          for (int rep = 0; rep < 7; rep++) {
            cudaEventRecord(t0); k.launch(n, B0, ub1, s, a, b, c, 0); cudaEventRecord(t1); cudaEventSynchronize(t1);
            float x; cudaEventElapsedTime(&x, t0, t1); ms.push_back(x);
          }
          std::sort(ms.begin(), ms.end());
          printf("n=%d\t%s\tB0=%d\tub1=%d\tthreads=%ld\t%.4f ms\t%.0f GFLOP/s\tmax rel err %.1e\n", n, k.name, B0, ub1, threads, ms[3], 2.0 * n * n * (double)n / ms[3] / 1e6, worst);
        }
    cudaFree(a); cudaFree(b); cudaFree(c); cudaFree(r);
  }
  return 0;
}
