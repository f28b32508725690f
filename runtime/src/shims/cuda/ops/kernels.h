// The launchers of the device kernels behind the CUDA op entries of this folder (ops.h; each family's kernels in
// its .cu file). Plain parameter structs, no tensor types: the entries check arguments, allocate
// outputs with ATen's layouts and fill these in; the launchers dispatch on the dtype code and throw
// aoti_host::Error for a dtype they do not support.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "shims/cuda/cuda_util.h"
#include "shims/ops/pool_window.h"

namespace aoti_host {
namespace cuda {

// Largest head size (query/key and value separately) the attention kernel takes.
constexpr int64_t kMaxHeadDim = 256;

// softmax(q k^T * scale + bias [+ causal mask]) v for q [B, H, M, D], k [B, H, N, D], v [B, H, N, Dv]
// (any strides, in elements); out [B, H, M, Dv]; lse [B, H, >= M] (natural-log logsumexp of the scaled
// scores) when lse is non-null.
struct AttentionSpec {
  int64_t b, h, m, n, d, dv;
  int64_t q_st[4], k_st[4], v_st[4], o_st[4];
  int64_t bias_st[4];  // bias broadcast to [B, H, M, N] (0 for broadcast dimensions)
  int64_t lse_st[3];
  float scale;
  // causal: key j is visible to query i when j <= i + causal_offset (0: top-left, N - M: bottom-right)
  bool causal;
  int64_t causal_offset;
  int32_t bias_dtype;  // -1: no bias; else the query dtype, or bool (false masks the key out)
};
void launch_attention(int32_t dtype, void* out, float* lse, const void* q, const void* k, const void* v,
                      const void* bias, const AttentionSpec& spec, cudaStream_t stream);

// The same attention through cuBLAS (matmul.cpp): per block of query rows, S = scale * Q K^T (float32
// scores), launch_attention_softmax, then O = P V, with the scratch for S and P bounded by
// kAttentionScratchBytes. Returns false, having launched nothing, when a layout or size does not suit
// it (the caller then runs launch_attention).
constexpr size_t kAttentionScratchBytes = size_t{128} << 20;
bool attention_gemm(int32_t dtype, void* out, float* lse, const void* q, const void* k, const void* v,
                    const void* bias, const AttentionSpec& spec, int device, cudaStream_t stream);

// Rows of scores for batch entries bh0 .. bh0 + batch - 1 (bh = b * H + h) and query rows i0 .. i0 + rows - 1:
// the softmax of scores[e * entry_st + r * ld + j] (float32, spec.n keys a row; ld and entry_st multiples of 4,
// scores 16-byte aligned) with the bias and the causal mask goes to probs at the same index, in `dtype` (probs
// may be scores for float32); lse (spec.lse_st) gets each row's logsumexp when non-null. A row with every key
// masked gets zeros and an lse of +inf, as launch_attention gives it.
void launch_attention_softmax(int32_t dtype, float* scores, void* probs, float* lse, const void* bias,
                              const AttentionSpec& spec, int64_t i0, int64_t rows, int64_t bh0, int64_t batch,
                              int64_t ld, int64_t entry_st, cudaStream_t stream);

// The pointer arrays of attention_gemm's batched products over entries bh0 .. bh0 + count - 1 (bh = b * heads + h)
// for layouts no single stride steps through: operand t (K, V, scores, probs, Q, O) of entry bh is
// base[t] + (b * st0[t] + h * st1[t]) - (the same for bh0), in bytes; Q and O (t = 4, 5) also move by
// row_step[t - 4] bytes per block of query rows. out gets [K, V, scores, probs][count], then per block of rows
// kb < blocks [Q, O][count].
struct AttentionPtrSpec {
  const char* base[6];
  int64_t st0[6], st1[6];
  int64_t row_step[2];
  int64_t count, bh0, heads, blocks;
};
void launch_attention_pointers(void** out, const AttentionPtrSpec& spec, cudaStream_t stream);

// One tensor's view of a batch of lines: the offset of line l's first element is the sum over the
// outer dimensions of (index * stride); `step` is the stride along the line.
struct LineSpec {
  int nd;                     // outer dimensions
  int64_t sizes[kMaxDims];    // outer sizes
  int64_t strides[3][kMaxDims];  // per tensor: input, output 0, output 1
  int64_t step[3];
  int64_t lines, n;  // number of lines, line length
};

// Sorts each line (NaN greatest, stable) and writes the first `keep` elements of the sorted order:
// values (same dtype) and int64 indices along the line. descending: largest first.
void launch_sort(int32_t dtype, const void* in, void* values, int64_t* indices, const LineSpec& spec, int64_t keep,
                 bool descending, cudaStream_t stream);

// Inclusive scan along each line: out = cumsum/cumprod of in (in converted to out_dtype first).
void launch_scan(int32_t in_dtype, int32_t out_dtype, const void* in, void* out, const LineSpec& spec, bool product,
                 cudaStream_t stream);
// cummax/cummin: running extreme and its (last on ties) index.
void launch_cum_extreme(int32_t dtype, const void* in, void* values, int64_t* indices, const LineSpec& spec,
                        bool max, cudaStream_t stream);

// aten::_embedding_bag on CUDA. indices/offsets/per-sample weights: 1-d, stepped by the given strides.
struct EmbeddingBagSpec {
  int64_t num_indices, num_bags, features, num_weights;
  int64_t w_st[2], out_st[2];
  int64_t idx_step, off_step, psw_step;
  int64_t mode;  // 0 sum, 1 mean, 2 max
  int64_t padding_idx;  // -1: none
  bool indices_int32, offsets_int32;  // else int64
  int32_t index_dtype;  // of the index outputs: int32 when indices and offsets both are, else int64
};
void launch_embedding_bag(int32_t dtype, const void* weight, const void* indices, const void* offsets,
                          const void* per_sample_weights, void* out, void* offset2bag, void* bag_size,
                          void* max_indices, int* bad_index, const EmbeddingBagSpec& spec, cudaStream_t stream);

// scatter / scatter_reduce over index's index space: out[... index[p] ...] (op) src[p].
struct ScatterSpec {
  int nd;
  int64_t dim;
  int64_t idx_sizes[kMaxDims];
  int64_t idx_st[kMaxDims], src_st[kMaxDims], out_st[kMaxDims];
  int64_t out_dim_size;
  int64_t numel;  // of index
};
enum class ScatterOp : int { kAssign = 0, kSum, kProd, kMean, kAmax, kAmin };
// For each index position: out[target] = identity of op (prepares include_self=False).
void launch_scatter_fill_identity(int32_t dtype, void* out, const int64_t* index, const ScatterSpec& spec, ScatterOp op,
                                  int* bad_index, cudaStream_t stream);
// src null: scatter `value`. counts non-null: counts[target offset in a dense copy of out] += 1
// (count_st: the dense strides).
void launch_scatter(int32_t dtype, void* out, const int64_t* index, const void* src, double value,
                    const ScatterSpec& spec, ScatterOp op, int* bad_index, cudaStream_t stream);
void launch_scatter_count(int32_t* counts, const int64_t* index, const ScatterSpec& spec, const int64_t* count_st,
                          cudaStream_t stream);
// out[i] /= (counts[i] + base) where that is non-zero (floor division for integral dtypes).
void launch_scatter_mean_divide(int32_t dtype, void* out, const int32_t* counts, const StridedSpec& out_spec,
                                int64_t numel, int base, cudaStream_t stream);

// searchsorted / bucketize: for each element i of self (row-major), the insertion point in row
// (one_d ? 0 : i / inner) of the sorted sequence, read through sorter when one is given.
struct SearchSpec {
  int nd;  // self's dimensions (0: a 0-d self)
  int64_t sizes[kMaxDims], self_st[kMaxDims];
  int64_t numel, inner;
  bool one_d;
  int outer_nd;  // the sequence's leading dimensions
  int64_t outer_sizes[kMaxDims], seq_outer_st[kMaxDims], sorter_outer_st[kMaxDims];
  int64_t n, seq_step, sorter_step;
  int32_t seq_dtype, self_dtype;
  bool ints;  // compare as int64 (both integral), else as double
  bool right;
  bool out_int32;
};
void launch_searchsorted(const void* seq, const void* self, const int64_t* sorter, void* out, const SearchSpec& spec,
                         int* bad_index, cudaStream_t stream);

// --- data-dependent outputs: nonzero, masked_select; histc; repeat_interleave; index_put ---

// Elements are visited in row-major order of `sizes`; the predicate element at pred_st is "set" when
// its bits masked with pred_bits are non-zero (all bits for integers and bool; all but the sign for
// floating dtypes, so -0.0 counts as zero and NaN as non-zero).
constexpr int kSelectBlock = 256;  // elements per block in both passes
struct SelectSpec {
  int nd;
  int64_t sizes[kMaxDims];
  int64_t pred_st[kMaxDims], src_st[kMaxDims];
  int64_t numel;
  int pred_size;  // bytes: 1, 2, 4 or 8
  uint64_t pred_bits;
};
// counts[b] = set elements among elements [b * kSelectBlock, (b + 1) * kSelectBlock).
void launch_select_count(const void* pred, const SelectSpec& s, int64_t* counts, cudaStream_t stream);
// The set elements in order: the one at rank r within block b goes to k = offsets[b] + r. coords
// non-null: coords[d * coord_stride + k] = its coordinate d; values non-null: values[k] = its element
// of src (itemsize bytes: 1, 2, 4, 8 or 16).
void launch_select_write(const void* pred, const SelectSpec& s, const int64_t* offsets, int64_t* coords,
                         int64_t coord_stride, const void* src, void* values, size_t itemsize, cudaStream_t stream);

// minmax[0] = min(minmax[0], smallest element), minmax[1] = max(minmax[1], largest) over the elements
// of x (sizes/pred_st of s); *nan = 1 when one is NaN.
void launch_minmax(int32_t dtype, const void* x, const SelectSpec& s, double* minmax, int* nan, cudaStream_t stream);
// ATen's CUDA histc: counts[bin] += 1 for each element in [lo, hi], bin = (x - lo) * bins / (hi - lo) in the
// accumulation type (the last edge into the last bin); then out[b] = counts[b] in dtype.
void launch_histc(int32_t dtype, const void* x, const SelectSpec& s, double lo, double hi, int64_t bins,
                  unsigned long long* counts, void* out, cudaStream_t stream);

// out[j] = i for j in [cum[i] - repeats[i], cum[i]) (cum: inclusive cumsum, int64), j < out_size; *bad = 1
// for a negative repeat, or when cum[n - 1] != out_size.
void launch_repeat_interleave(int32_t dtype, const void* repeats, int64_t step, const int64_t* cum, int64_t n,
                              void* out, int64_t out_size, int* bad, cudaStream_t stream);

// One double written on the device (capture-safe: the value travels as a kernel argument).
void launch_fill_f64(double* p, double value, cudaStream_t stream);

// index_put over the indexed result shape rshape (row-major): for position p, the target element of out
// is sum_d tgt_d * out_st[d], where tgt_d = p[rdim[d]] for a dimension without an index tensor
// (idx[d] null), else the index tensor's element at sum_r p[r] * idx_st[d][r] (int32 or int64 by
// idx_int32[d]; negative wraps once; out of range sets *bad and skips); the value is values at
// sum_r p[r] * val_st[r]. accumulate: atomic add, else a plain store.
struct IndexPutSpec {
  int nd;  // self's dimensions
  int rnd;  // result dimensions
  int64_t self_sizes[kMaxDims], out_st[kMaxDims];
  int64_t rsizes[kMaxDims], val_st[kMaxDims];
  const void* idx[kMaxDims];
  bool idx_int32[kMaxDims];
  int64_t idx_st[kMaxDims][kMaxDims];
  int rdim[kMaxDims];
  int64_t numel;
};
void launch_index_put(int32_t dtype, void* out, const void* values, const IndexPutSpec& s, bool accumulate, int* bad,
                      cudaStream_t stream);

// Pooling over the windows of ops/pool_window.h: output element i is plane i / prod(out_sp) (a plane is
// one index of the 1 or 2 leading dimensions, lead_sizes) at spatial position i % prod(out_sp). Max kinds
// write the largest value (a NaN wins) and, when indices is non-null, its flat position in the input
// plane (indices share out's strides); average kinds write the mean (sums in double).
struct PoolSpec {
  ops::PoolWindows w;
  int lead;
  int64_t lead_sizes[2], in_lead_st[2], out_lead_st[2];
  int64_t in_sp_st[ops::kPoolMaxDims], out_sp_st[ops::kPoolMaxDims];
  int64_t total;  // output elements
};
void launch_pool(int32_t dtype, const void* in, void* out, int64_t* indices, const PoolSpec& spec,
                 cudaStream_t stream);

// aten::_int_mm: out[m, n] = sum_k a[m, k] * b[k, n], int8 operands, int32 out (wrapping as ATen's).
// aten::_weight_int8pack_mm: out[m, n] = (sum_k a[m, k] * w[n, k]) * scales[n], a and scales and out of
// `dtype` (float32, float16, bfloat16), w int8; products accumulate in float. Strides in elements.
struct MatmulSpec {
  int64_t m, n, k;
  int64_t a_st[2], b_st[2], out_st[2];
  int64_t scale_step;
};
void launch_int_mm(const int8_t* a, const int8_t* b, int32_t* out, const MatmulSpec& spec, cudaStream_t stream);
void launch_weight_int8pack_mm(int32_t dtype, const void* a, const int8_t* w, const void* scales, void* out,
                               const MatmulSpec& spec, cudaStream_t stream);

// abs (angle when `angle`) of each element of a complex64/complex128 (float32/float64) tensor into a real one
// of the part type: element i of the index space spec.sizes is read at spec.src_strides and written at
// spec.dst_strides (in elements of each tensor).
void launch_complex_abs(int32_t dtype, const void* in, void* out, const StridedSpec& spec, int64_t numel, bool angle,
                        cudaStream_t stream);
// p[i] *= scale for n contiguous float32/float64 values (a complex tensor's parts, for the FFT normalization).
void launch_scale(int32_t dtype, void* p, int64_t n, double scale, cudaStream_t stream);

}  // namespace cuda
}  // namespace aoti_host
