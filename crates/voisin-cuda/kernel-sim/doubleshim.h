// f64 intrinsics for the CPU simulator (rerank.sh): one IEEE operation each, as on the device
// (compiled with -ffp-contract=off so that nothing is fused).
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __double2float_rn(double a) { return (float)a; }
inline long long __double_as_longlong(double x) { long long u; memcpy(&u, &x, 8); return u; }
inline double __longlong_as_double(long long u) { double x; memcpy(&x, &u, 8); return x; }
struct uint2 { unsigned x, y; };
