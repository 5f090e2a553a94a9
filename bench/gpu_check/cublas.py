"""cuBLAS SGEMM through PyTorch (TF32 off): c += a * b at n x n, median of 21 timed runs after 3
warm-ups, CUDA events. Prints `cublas_sgemm n=N median_ms=M gflops=G`."""
import sys

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
a = torch.rand(n, n, device="cuda", dtype=torch.float32) * 2 - 1
b = torch.rand(n, n, device="cuda", dtype=torch.float32) * 2 - 1
c = torch.zeros(n, n, device="cuda", dtype=torch.float32)
for _ in range(3):
    c.addmm_(a, b)
torch.cuda.synchronize()
times = []
for _ in range(21):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    c.addmm_(a, b)
    stop.record()
    stop.synchronize()
    times.append(start.elapsed_time(stop))
times.sort()
median = times[len(times) // 2]
print(f"cublas_sgemm n={n} median_ms={median:.4f} gflops={2 * n ** 3 / median / 1e6:.1f} device={torch.cuda.get_device_name()}")
