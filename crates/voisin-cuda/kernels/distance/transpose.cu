// Tile transpose for the k-NN graph: a tile (I, J) with I < J also holds the column candidates
// of the J items; transposing it lets the same row-wise select kernel read them coalesced.
// 32x32 blocks through shared memory, padded by one word against bank conflicts.

extern "C" __global__ void transpose(const float* __restrict__ in, long long ld_in, int rows,
                                     int cols, float* __restrict__ out, long long ld_out) {
    __shared__ float t[32][33];
    int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int y = threadIdx.y; y < 32; y += blockDim.y) {
        int r = r0 + y, c = c0 + threadIdx.x;
        if (r < rows && c < cols) t[y][threadIdx.x] = in[(size_t)r * ld_in + c];
    }
    __syncthreads();
    for (int y = threadIdx.y; y < 32; y += blockDim.y) {
        int c = c0 + y, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out[(size_t)c * ld_out + r] = t[threadIdx.x][y];
    }
}
