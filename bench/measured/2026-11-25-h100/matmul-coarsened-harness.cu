// Scratch: the coarsened matmul kernels (not forked on by the tree) against the tree's blocked
// leaves at the same parameter values, n = 2048, H100. Median of 7 after a warm-up.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cuda_runtime.h>
#define DECL(name) extern "C" cudaError_t metafork_launch_##name(int, int, int, int, const float *, const float *, float *, cudaStream_t); \
  extern "C" cudaError_t metafork_allow_shared_##name(size_t); \
  extern "C" cudaError_t metafork_attributes_##name(cudaFuncAttributes *);
DECL(matmul_coarse_s8_k8) DECL(matmul_coarse_s4_k4) DECL(matmul_leaf12) DECL(matmul_leaf30)
typedef cudaError_t (*Launch)(int, int, int, int, const float *, const float *, float *, cudaStream_t);
typedef cudaError_t (*Allow)(size_t);
typedef cudaError_t (*Attr)(cudaFuncAttributes *);
struct K { const char *name; Launch launch; Allow allow; Attr attr; int s; int k; };
__global__ void naive(int n, const float *a, const float *b, float *c) {
  int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && j < n) { double acc = 0; for (int z = 0; z < n; z++) acc += (double)a[(long)i * n + z] * b[(long)z * n + j]; c[(long)i * n + j] = (float)acc; }
}
int main() {
  const int n = 2048;
  K ks[] = {{"coarse_s8_k8", metafork_launch_matmul_coarse_s8_k8, metafork_allow_shared_matmul_coarse_s8_k8, metafork_attributes_matmul_coarse_s8_k8, 8, 8},
            {"leaf12(s=8)", metafork_launch_matmul_leaf12, metafork_allow_shared_matmul_leaf12, metafork_attributes_matmul_leaf12, 8, 1},
            {"coarse_s4_k4", metafork_launch_matmul_coarse_s4_k4, metafork_allow_shared_matmul_coarse_s4_k4, metafork_attributes_matmul_coarse_s4_k4, 4, 4},
            {"leaf30(s=4)", metafork_launch_matmul_leaf30, metafork_allow_shared_matmul_leaf30, metafork_attributes_matmul_leaf30, 4, 1}};
  size_t bytes = (size_t)n * n * 4;
  std::vector<float> ha(n * (size_t)n), hb(n * (size_t)n), href(n * (size_t)n), hc(n * (size_t)n);
  srand(7);
  for (auto &x : ha) x = (rand() % 2001 - 1000) / 1000.0f;
  for (auto &x : hb) x = (rand() % 2001 - 1000) / 1000.0f;
  float *a, *b, *c, *ref;
  cudaMalloc(&a, bytes); cudaMalloc(&b, bytes); cudaMalloc(&c, bytes); cudaMalloc(&ref, bytes);
  cudaMemcpy(a, ha.data(), bytes, cudaMemcpyHostToDevice); cudaMemcpy(b, hb.data(), bytes, cudaMemcpyHostToDevice);
  naive<<<dim3(n / 16, n / 16), dim3(16, 16)>>>(n, a, b, ref);
  cudaMemcpy(href.data(), ref, bytes, cudaMemcpyDeviceToHost);
  int dev; cudaGetDevice(&dev); int optin; cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  for (auto &k : ks) { k.allow(optin); cudaFuncAttributes at; k.attr(&at); printf("# %s: %d registers, %zu local bytes\n", k.name, at.numRegs, at.localSizeBytes); }
  printf("kernel\tB0\tub1\ts\tthreads\tshared_bytes\tmedian_ms\tGFLOPs\tmax_err\n");
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (auto &k : ks)
    for (int B0 : {8, 16, 32, 64, 128})
      for (int ub1 : {4, 8, 16, 32, 64, 128}) {
        int s = k.s;
        if (B0 > s * ub1 || n % B0 || n % (ub1 * s) || B0 % k.k) continue;
        long threads = (long)ub1 * B0 / k.k;
        if (threads > 1024 || threads < 32) continue;
        long shared = 4L * B0 * B0 + 4L * s * ub1 * B0;
        if (shared > optin) continue;
        cudaMemset(c, 0, bytes);
        cudaError_t err = k.launch(n, B0, ub1, s, a, b, c, 0);
        cudaError_t sync = cudaDeviceSynchronize();
        if (err != cudaSuccess || sync != cudaSuccess) { printf("%s\t%d\t%d\t%d\t%ld\t%ld\tFAIL %s %s\n", k.name, B0, ub1, s, threads, shared, cudaGetErrorString(err), cudaGetErrorString(sync)); cudaGetLastError(); continue; }
        cudaMemcpy(hc.data(), c, bytes, cudaMemcpyDeviceToHost);
        double worst = 0; for (size_t i = 0; i < hc.size(); i++) worst = std::max(worst, (double)fabs(hc[i] - href[i]) / std::max(1.0, (double)fabs(href[i])));
        std::vector<float> t;
        for (int r = 0; r < 8; r++) { cudaEventRecord(e0); k.launch(n, B0, ub1, s, a, b, c, 0); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); if (r) t.push_back(ms); }
        std::sort(t.begin(), t.end()); float med = t[t.size() / 2];
        printf("%s\t%d\t%d\t%d\t%ld\t%ld\t%.4f\t%.0f\t%.1e\n", k.name, B0, ub1, s, threads, shared, med, 2.0 * n * n * n / med / 1e6, worst);
      }
  return 0;
}
