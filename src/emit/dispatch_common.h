#ifndef METAFORK_DISPATCH_COMMON
#define METAFORK_DISPATCH_COMMON
/* Shared by every metafork dispatch header (defined once). */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device limits the decision trees' machine symbols stand for. */
typedef struct metafork_device {
  long long registers_per_thread;          /* R: 255 from compute capability 3.0 on, 63 before (CUDA C++ Programming Guide, Technical Specifications per Compute Capability) */
  long long shared_memory_per_block_optin; /* Z_B: bytes of shared memory a block can opt into */
  long long shared_memory_per_block;       /* bytes a block gets without opting in */
  long long threads_per_block;             /* T_B */
  long long registers_per_block;           /* R_B: 32-bit registers */
  long long registers_per_multiprocessor;  /* R_SM: 32-bit registers of one multiprocessor */
  long long warps_per_multiprocessor;      /* W_SM: resident warps per multiprocessor */
  long long multiprocessors;               /* N_SM: multiprocessors of the device */
  long long max_grid_size[3];              /* blocks per grid along x, y, z (cudaDeviceProp::maxGridSize); 0: not known, not checked */
} metafork_device;

/* Negative results of select and launch. */
enum {
  METAFORK_ASSERT_FAILED = -1,       /* an assert() of the program is false; detail: the fact */
  METAFORK_OUTSIDE_ASSUMPTIONS = -2, /* an assume() of the program is false, or its arithmetic (a scalar, a grid, a kernel's integer operation) is undefined: no kernel is valid there; detail: the fact or the definition */
  METAFORK_NO_KERNEL = -3,           /* the tree has no kernel for this device and these parameters; detail: the counter */
  METAFORK_OVERFLOW = -4,            /* a constraint could not be evaluated in 128-bit integers */
  METAFORK_NO_LEAF = -5,             /* the compiled leaves need more registers than the device offers at this block size */
  METAFORK_BAD_DEVICE = -6,          /* a device limit is not positive, or past INT_MAX (CUDA reports each as an int) */
  METAFORK_CUDA_ERROR = -7,          /* the CUDA runtime failed; see *cuda_error */
  METAFORK_GRID_TOO_LARGE = -8       /* every kernel that admits the point needs more blocks than the device's grid allows; detail: the dimension */
};

/* Results of metafork_<schedule>_wisdom. */
enum {
  METAFORK_WISDOM_EXACT = 0,   /* measured on this device at sizes in the same power-of-two buckets */
  METAFORK_WISDOM_NEAREST = 1, /* measured on this device at other sizes: the nearest admissible entry */
  METAFORK_WISDOM_NONE = 2     /* no entry for this device admits the point: parameters unchanged */
};

/* The power-of-two bucket of a size: floor(log2(v)), -1 for v <= 0. */
static inline int metafork_bucket(long long v) { int b = -1; while (v > 0) { v >>= 1; b++; } return b; }

static inline const char *metafork_status_string(int status) {
  switch (status) {
  case METAFORK_ASSERT_FAILED: return "an assert() of the program does not hold";
  case METAFORK_OUTSIDE_ASSUMPTIONS: return "outside the program's assumptions: an assume() does not hold, or the program's own arithmetic is undefined there (the detail says which), so no kernel is valid";
  case METAFORK_NO_KERNEL: return "no kernel exists for this device and these parameters";
  case METAFORK_OVERFLOW: return "the parameters are too large to evaluate the constraints";
  case METAFORK_NO_LEAF: return "no compiled kernel fits this device at these parameters";
  case METAFORK_BAD_DEVICE: return "a device limit is not positive, or is past INT_MAX";
  case METAFORK_CUDA_ERROR: return "the CUDA runtime reported an error";
  case METAFORK_GRID_TOO_LARGE: return "every kernel for these parameters needs a larger grid than the device allows";
  default: return status >= 0 ? "a kernel was selected" : "unknown status";
  }
}

/* Every limit in 1..INT_MAX, as CUDA reports them (cudaDeviceGetAttribute gives an int). */
static inline int metafork_device_valid(const metafork_device *d) {
  const long long limits[] = {d->registers_per_thread, d->shared_memory_per_block_optin, d->shared_memory_per_block, d->threads_per_block,
                              d->registers_per_block, d->registers_per_multiprocessor, d->warps_per_multiprocessor, d->multiprocessors};
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
    if (limits[i] <= 0 || limits[i] > INT_MAX) return 0;
  return 1;
}

/* 64-bit arithmetic for the program's facts: *ok becomes 0 on overflow or division by zero. */
static inline long long metafork_add_ll(long long a, long long b, int *ok) { long long r; if (__builtin_add_overflow(a, b, &r)) { *ok = 0; return 0; } return r; }
static inline long long metafork_sub_ll(long long a, long long b, int *ok) { long long r; if (__builtin_sub_overflow(a, b, &r)) { *ok = 0; return 0; } return r; }
static inline long long metafork_mul_ll(long long a, long long b, int *ok) { long long r; if (__builtin_mul_overflow(a, b, &r)) { *ok = 0; return 0; } return r; }
static inline long long metafork_div_ll(long long a, long long b, int *ok) { if (b == 0 || (a == LLONG_MIN && b == -1)) { *ok = 0; return 0; } return a / b; }
static inline long long metafork_rem_ll(long long a, long long b, int *ok) { if (b == 0 || (a == LLONG_MIN && b == -1)) { *ok = 0; return 0; } return a % b; }
static inline long long metafork_int_ll(long long a, int *ok) { if (a < INT_MIN || a > INT_MAX) { *ok = 0; return 0; } return a; }
static inline long long metafork_char_ll(long long a, int *ok) { if (a < -128 || a > 127) { *ok = 0; return 0; } return a; }
static inline long long metafork_min_ll(long long a, long long b) { return a < b ? a : b; }
static inline long long metafork_max_ll(long long a, long long b) { return a > b ? a : b; }
static inline long long metafork_abs_ll(long long a, int *ok) { if (a == LLONG_MIN) { *ok = 0; return 0; } return a < 0 ? -a : a; }

/* A polynomial as a range of terms, a term as a coefficient times a range of factors
   (variable index, exponent), a constraint as `poly REL 0` (REL: 0 <, 1 <=, 2 ==, 3 !=). */
typedef struct metafork_factor { int var; int exponent; } metafork_factor;
typedef struct metafork_term { long long coeff; int first_factor; int factor_count; } metafork_term;
/* A polynomial's value is its terms' sum over `divisor` (1 but for a coarsened block's
   threads, exact where its rule holds). */
typedef struct metafork_poly { int first_term; int term_count; long long divisor; } metafork_poly;
/* rel: 0 `<`, 1 `<=`, 2 `==`, 3 `!=` (poly against 0); 4 `% modulus == 0`, 5 `% modulus != 0`;
   estimated: 1 where it compares an ancestor code's register estimate with the device. */
typedef struct metafork_constraint { int rel; long long modulus; metafork_poly poly; int estimated; } metafork_constraint;
/* A leaf: a kernel (index >= 0) or none (-1, with the counter that could not be lowered). */
typedef struct metafork_rule {
  int kernel;
  const char *no_kernel_reason;
  int first_constraint;
  int constraint_count;
  long long registers; /* the tree's estimate per thread */
  metafork_poly threads;
  metafork_poly shared_bytes;
} metafork_rule;

/* The value of a polynomial, in the tables' term and factor order; 0 on overflow. */
static inline int metafork_poly_value(const metafork_term *terms, const metafork_factor *factors, metafork_poly p, const long long *vals, __int128 *out) {
  __int128 sum = 0;
  for (int t = p.first_term; t < p.first_term + p.term_count; t++) {
    __int128 term = terms[t].coeff;
    for (int f = terms[t].first_factor; f < terms[t].first_factor + terms[t].factor_count; f++)
      for (int e = 0; e < factors[f].exponent; e++)
        if (__builtin_mul_overflow(term, (__int128)vals[factors[f].var], &term)) return 0;
    if (__builtin_add_overflow(sum, term, &sum)) return 0;
  }
  *out = sum / p.divisor;
  return 1;
}

/* The grid dimension a kernel's extent `v` (ok: computed without overflow in its C types)
   exceeds on `dev` (dimension `d`), or cannot be computed at all (whatever the device), as a
   detail, or 0 when it fits (an extent of 0 or less launches nothing). */
static inline const char *metafork_grid_refusal(const metafork_device *dev, int d, long long v, int ok) {
  static const char *const names[] = {"the grid's x extent", "the grid's y extent", "the grid's z extent"};
  return !ok || (dev->max_grid_size[d] > 0 && v > dev->max_grid_size[d]) ? names[d] : 0;
}

/* The first kernel rule whose constraints hold at `vals` (parameters, then R, Z_B, T_B, R_B from
   index `machine`); a kernel's own register check uses `registers[kernel]` when positive, and
   `max_threads[kernel]` when positive must admit the block; a kernel with `grid[kernel]`
   not NULL (the dimension its grid exceeds on the device) is passed over. Where none is taken
   and real counts are known, a second pass sets the estimated constraints aside and takes the
   first kernel with a known count that fits (an ancestor code that really needs more registers
   than estimated must not keep the leaves of its reduced code out). */
static inline int metafork_select_from_table(const metafork_rule *rules, int rule_count, const metafork_constraint *constraints,
                                        const metafork_term *terms, const metafork_factor *factors, const long long *vals,
                                        int machine, const long long *registers, const long long *max_threads,
                                        const char *const *grid, const char **detail) {
  const char *no_kernel = 0, *too_large = 0;
  int known = 0;
  for (int i = 0; registers && i < rule_count; i++)
    if (rules[i].kernel >= 0 && registers[rules[i].kernel] > 0) known = 1;
  for (int second = 0; second < 1 + known; second++) {
    for (int i = 0; i < rule_count; i++) {
      const metafork_rule *r = &rules[i];
      int holds = 1;
      for (int c = r->first_constraint; holds && c < r->first_constraint + r->constraint_count; c++) {
        __int128 v;
        if (second && constraints[c].estimated) continue;
        if (!metafork_poly_value(terms, factors, constraints[c].poly, vals, &v)) return METAFORK_OVERFLOW;
        switch (constraints[c].rel) {
        case 0: holds = v < 0; break;
        case 1: holds = v <= 0; break;
        case 2: holds = v == 0; break;
        case 3: holds = v != 0; break;
        case 4: holds = v % constraints[c].modulus == 0; break;
        default: holds = v % constraints[c].modulus != 0; break;
        }
      }
      if (!holds) continue;
      if (r->kernel < 0) {
        if (!second && !no_kernel) no_kernel = r->no_kernel_reason;
        continue;
      }
      if (second && !(registers[r->kernel] > 0)) continue;
      long long reg = registers && registers[r->kernel] > 0 ? registers[r->kernel] : r->registers;
      long long most = max_threads ? max_threads[r->kernel] : 0;
      __int128 threads, per_block;
      if (!metafork_poly_value(terms, factors, r->threads, vals, &threads)) return METAFORK_OVERFLOW;
      if (__builtin_mul_overflow((__int128)reg, threads, &per_block)) return METAFORK_OVERFLOW;
      if (reg <= vals[machine] && per_block <= vals[machine + 3] && (most <= 0 || threads <= most)) {
        if (!grid || !grid[r->kernel]) return r->kernel;
        if (!too_large) too_large = grid[r->kernel];
      }
    }
  }
  if (too_large) {
    if (detail) *detail = too_large;
    return METAFORK_GRID_TOO_LARGE;
  }
  if (no_kernel) {
    if (detail) *detail = no_kernel;
    return METAFORK_NO_KERNEL;
  }
  return METAFORK_NO_LEAF;
}

/* The shared-memory bytes of kernel leaf `leaf`; -1 on overflow or a bad index. */
static inline long long metafork_shared_bytes_of_leaf(const metafork_rule *rules, int rule_count, const metafork_term *terms,
                                                   const metafork_factor *factors, int leaf, const long long *vals) {
  for (int i = 0; i < rule_count; i++) {
    __int128 v;
    if (rules[i].kernel != leaf || leaf < 0) continue;
    if (!metafork_poly_value(terms, factors, rules[i].shared_bytes, vals, &v) || v > LLONG_MAX) return -1;
    return (long long)v;
  }
  return -1;
}

#if defined(__CUDACC__) || defined(CUDART_VERSION)
/* The current device's limits from the CUDA runtime. */
static inline cudaError_t metafork_query_device(metafork_device *dev) {
  int device = 0, v = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, device)) != cudaSuccess) return e;
  dev->registers_per_thread = v >= 3 ? 255 : 63;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) != cudaSuccess) return e;
  dev->shared_memory_per_block_optin = v;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlock, device)) != cudaSuccess) return e;
  dev->shared_memory_per_block = v;
  if (dev->shared_memory_per_block_optin < dev->shared_memory_per_block) dev->shared_memory_per_block_optin = dev->shared_memory_per_block;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, device)) != cudaSuccess) return e;
  dev->threads_per_block = v;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxRegistersPerBlock, device)) != cudaSuccess) return e;
  dev->registers_per_block = v;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxRegistersPerMultiprocessor, device)) != cudaSuccess) return e;
  dev->registers_per_multiprocessor = v;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerMultiProcessor, device)) != cudaSuccess) return e;
  dev->warps_per_multiprocessor = v / 32;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return e;
  dev->multiprocessors = v;
  const cudaDeviceAttr grid[3] = {cudaDevAttrMaxGridDimX, cudaDevAttrMaxGridDimY, cudaDevAttrMaxGridDimZ};
  for (int d = 0; d < 3; d++) {
    if ((e = cudaDeviceGetAttribute(&v, grid[d], device)) != cudaSuccess) return e;
    dev->max_grid_size[d] = v;
  }
  return cudaSuccess;
}
#endif

#endif /* METAFORK_DISPATCH_COMMON */
