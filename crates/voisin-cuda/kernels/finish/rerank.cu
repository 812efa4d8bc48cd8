// k-NN finish on the device (src/search/knn.rs `search`): one block per query proves its sorted
// candidate list with the f32 error bound, re-ranks the candidates that may be among the k
// nearest on exact f64 keys (`exact_key` of common/exact.cuh, so bit-identical to the CPU engine), sorts
// them by (key, index) and writes the k nearest as reported distances and ids. Only those cross
// the bus; a query whose list does not prove is flagged and left to the host's widening path.
//
// The bound's arithmetic mirrors prepare.rs `Plan::lower/upper` operation by operation (each
// rounded on its own): lower(v) = ((v - abs) - rel|v|) - tiny, upper(v) = ((v + abs) + rel|v|) +
// tiny. Keys are sorted as the integers that order doubles like Rust's total_cmp, paired with
// the index (ties go to the smaller index), so the order is the host's exactly.

#include "common/exact.cuh"
#include "common/keys.cuh"

// RR_NOT_DONE and the distance forms RR_* come from src/runtime/abi.rs.

__device__ __forceinline__ double rr_lower(float v, double abs, double rel, double tiny) {
    double x = (double)v;
    return __dsub_rn(__dsub_rn(__dsub_rn(x, abs), __dmul_rn(rel, fabs(x))), tiny);
}

__device__ __forceinline__ double rr_upper(float v, double abs, double rel, double tiny) {
    double x = (double)v;
    return __dadd_rn(__dadd_rn(__dadd_rn(x, abs), __dmul_rn(rel, fabs(x))), tiny);
}

// Doubles as unsigned integers in total_cmp order (and back).
__device__ __forceinline__ unsigned long long rr_order(double x) {
    unsigned long long u = (unsigned long long)__double_as_longlong(x);
    return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}

__device__ __forceinline__ double rr_unorder(unsigned long long u) {
    return __longlong_as_double((long long)((u >> 63) ? (u & 0x7fffffffffffffffull) : ~u));
}

// Reported distance of an exact key (Metric::key_to_distance, then rounded to f32); `form` is
// exact.rs `distance_form`: RR_KEY the key itself, RR_NEGATED its negation, RR_SQRT the square
// root of max(key, 0).
__device__ __forceinline__ float rr_distance(double key, int form) {
    double d = form == RR_NEGATED ? -key : (form == RR_SQRT ? __dsqrt_rn(fmax(key, 0.0)) : key);
    return __double2float_rn(d);
}

// list_val/list_idx: rows x width (width a power of two), each row sorted ascending by key with
// its valid entries first (empty slots hold NO_INDEX); a row that is not is left to the host,
// which sorts. whole: the entries of a list that holds every candidate (the base's items for a
// k-NN, the other items for a graph's rows): nothing to prove. abs: each row's bound. base/qs:
// raw rows of d values, ld apart, for exact keys (query of row r: q_off + r). Outputs: rows x k
// distances (out_dist) and exact keys (out_key), either a null pointer when not wanted, ids,
// and per row the number of exact keys computed, or RR_NOT_DONE. Shared memory: width x 12
// bytes.
extern "C" __global__ void rerank(const float* __restrict__ list_val,
                                  const unsigned* __restrict__ list_idx, int width, int rows,
                                  unsigned whole, int k, const double* __restrict__ abs,
                                  double rel, double tiny, const elem_t* __restrict__ base,
                                  const elem_t* __restrict__ qs, unsigned q_off, int d,
                                  long long ld, int metric,
                                  double zero, int form, float* __restrict__ out_dist,
                                  double* __restrict__ out_key, unsigned* __restrict__ out_idx,
                                  unsigned* __restrict__ status) {
    DYNAMIC_SHARED(unsigned long long, rr_key);
    unsigned* rr_idx = (unsigned*)(rr_key + width);
    __shared__ int valid, cut;
    int r = blockIdx.x;
    if (r >= rows) return;
    const float* lv = list_val + (size_t)r * width;
    const unsigned* li = list_idx + (size_t)r * width;
    if (threadIdx.x == 0) {
        valid = 0;
        cut = width;
    }
    __syncthreads();
    int mine = 0;
    bool unordered = false;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        bool in = li[i] != NO_INDEX;
        mine += in;
        // An entry after an empty slot, or below its predecessor: not the form proved here.
        if (in && i > 0 && (li[i - 1] == NO_INDEX || lv[i - 1] > lv[i])) unordered = true;
    }
    if (mine) atomicAdd(&valid, mine);
    if (__syncthreads_or(unordered)) {
        if (threadIdx.x == 0) status[r] = RR_NOT_DONE;
        return;
    }
    // Every thread reaches the same verdict from the same values.
    int n = valid;
    double a = abs[r];
    bool proven;
    if ((unsigned)n >= whole) {
        proven = n >= k;  // every item is a candidate
    } else {
        // Whatever the list left out has a key at least its last one: it cannot come before
        // the k-th once its lowest exact key exceeds the k-th's highest.
        proven = n >= k && rr_lower(lv[n - 1], a, rel, tiny) > rr_upper(lv[k - 1], a, rel, tiny);
    }
    if (!proven) {
        if (threadIdx.x == 0) status[r] = RR_NOT_DONE;
        return;
    }
    // Candidates: the prefix of entries whose lowest exact key reaches the k-th's highest
    // (knn.rs `finish` takes the same prefix).
    double thr = rr_upper(lv[k - 1], a, rel, tiny);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        if (rr_lower(lv[i], a, rel, tiny) > thr) {
            atomicMin(&cut, i);
            break;
        }
    }
    __syncthreads();
    int m = cut < n ? cut : n;
    int p = 1;
    while (p < m) p <<= 1;
    const elem_t* q = qs + (size_t)(q_off + r) * ld;
    for (int i = threadIdx.x; i < p; i += blockDim.x) {
        if (i < m) {
            unsigned b = li[i];
            rr_key[i] = rr_order(exact_key(base + (size_t)b * ld, q, d, metric, zero));
            rr_idx[i] = b;
        } else {
            rr_key[i] = ~0ull;
            rr_idx[i] = NO_INDEX;
        }
    }
    __syncthreads();
    for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < (p >> 1); i += blockDim.x) {
                int lo = 2 * i - (i & (stride - 1));
                int hi = lo + stride;
                bool asc = (lo & size) == 0;
                unsigned long long kl = rr_key[lo], kh = rr_key[hi];
                unsigned il = rr_idx[lo], ih = rr_idx[hi];
                bool greater = kl > kh || (kl == kh && il > ih);
                if (greater == asc) {
                    rr_key[lo] = kh;
                    rr_key[hi] = kl;
                    rr_idx[lo] = ih;
                    rr_idx[hi] = il;
                }
            }
            __syncthreads();
        }
    }
    // m >= k: the k-th entry itself passes (its lower bound is below its upper one).
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        double key = rr_unorder(rr_key[i]);
        if (out_dist) out_dist[(size_t)r * k + i] = rr_distance(key, form);
        if (out_key) out_key[(size_t)r * k + i] = key;
        out_idx[(size_t)r * k + i] = rr_idx[i];
    }
    if (threadIdx.x == 0) status[r] = m < k ? RR_NOT_DONE : (unsigned)m;
}
