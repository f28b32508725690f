// aten::_embedding_bag and _embedding_bag_forward_only on CUDA (the same forward computation).
#include <cuda_runtime_api.h>

#include <string>

#include "shims/cuda/ops/op_util.h"
#include "shims/cuda/ops/ops.h"

namespace aoti_host {
namespace cuda {

// ATen's _embedding_bag_cuda: output [bags, features]; offset2bag [indices]; bag_size with offsets'
// sizes (its last entry 0 when include_last_offset); max_indices [bags, features] for mode max (-1 for
// an empty bag), else [0]. Index outputs are int32 when indices and offsets both are, else int64.
void embedding_bag(const Tensor& w, const Tensor& idx, const Tensor& off, bool scale_grad_by_freq, int64_t mode,
                   bool sparse, const Tensor* psw, bool include_last_offset, int64_t padding_idx, Tensor** ret0,
                   Tensor** ret1, Tensor** ret2, Tensor** ret3) {
  (void)scale_grad_by_freq;  // gradient-only options: no effect on the forward result
  (void)sparse;
  const int device = w.device_index();
  require_cuda(w, "weight", device);
  require_cuda(idx, "indices", device);
  require_cuda(off, "offsets", device);
  if (w.dim() != 2) throw Error("weight " + list_str(w.sizes()) + " must be 2-d");
  if (idx.dim() != 1 || off.dim() != 1)
    throw Error("indices " + list_str(idx.sizes()) + " and offsets " + list_str(off.sizes()) +
                " must be 1-d (2-d input is flattened with its offsets before this op)");
  for (const Tensor* t : {&idx, &off})
    if (t->dtype() != dc::kInt32 && t->dtype() != dc::kInt64)
      throw Error(std::string(t == &idx ? "indices" : "offsets") + " has dtype " + aoti_host::dtype_name(t->dtype()) +
                  "; expected int32 or int64");
  if (mode < 0 || mode > 2) throw Error("mode " + std::to_string(mode) + " is not 0 (sum), 1 (mean) or 2 (max)");
  cu::EmbeddingBagSpec s{};
  s.num_indices = idx.sizes()[0];
  s.num_bags = off.sizes()[0];
  if (include_last_offset) {
    if (s.num_bags < 1) throw Error("include_last_offset needs at least one offset");
    s.num_bags -= 1;
  }
  s.features = w.sizes()[1], s.num_weights = w.sizes()[0];
  s.w_st[0] = w.strides()[0], s.w_st[1] = w.strides()[1];
  s.idx_step = idx.strides()[0], s.off_step = off.strides()[0];
  s.mode = mode, s.padding_idx = padding_idx;
  s.indices_int32 = idx.dtype() == dc::kInt32, s.offsets_int32 = off.dtype() == dc::kInt32;
  s.index_dtype = s.indices_int32 && s.offsets_int32 ? dc::kInt32 : dc::kInt64;
  if (psw != nullptr) {
    if (mode != 0) throw Error("per_sample_weights are only supported with mode sum (0), got mode " +
                               std::to_string(mode));
    require_cuda(*psw, "per_sample_weights", device);
    require_dtype(*psw, w.dtype(), "per_sample_weights");
    if (psw->dim() != 1 || psw->sizes()[0] != s.num_indices)
      throw Error("per_sample_weights " + list_str(psw->sizes()) + " must be 1-d with one weight per index (" +
                  std::to_string(s.num_indices) + ")");
    s.psw_step = psw->strides()[0];
  }
  Owned out(new_cuda(w.dtype(), {s.num_bags, s.features}, device));
  Owned o2b(new_cuda(s.index_dtype, {s.num_indices}, device));
  Owned bag_size(new_cuda(s.index_dtype, off.sizes(), device));
  Owned max_idx(new_cuda(s.index_dtype, mode == 2 ? Shape{s.num_bags, s.features} : Shape{0}, device));
  s.out_st[0] = out->strides()[0], s.out_st[1] = out->strides()[1];
  cu::zero(*o2b);
  cu::zero(*bag_size);
  if (s.num_bags > 0 && s.num_indices > 0 && off.numel() > 0) {
    const cudaStream_t stream = cu::stream_of(device);
    BadIndexFlag bad(device, stream);
    cu::launch_embedding_bag(w.dtype(), w.data_ptr(), idx.data_ptr(), off.data_ptr(),
                             psw != nullptr ? psw->data_ptr() : nullptr, out->data_ptr(), o2b->data_ptr(),
                             bag_size->data_ptr(), max_idx->data_ptr(), bad.ptr(), s, stream);
    bad.check("an index is out of range for the " + std::to_string(s.num_weights) + " rows of weight");
  } else if (out->numel() > 0) {
    cu::zero(*out);
    if (mode == 2) cu::zero(*max_idx);
  }
  *ret0 = out.release();
  *ret1 = o2b.release();
  *ret2 = bag_size.release();
  *ret3 = max_idx.release();
}

}  // namespace cuda
}  // namespace aoti_host
