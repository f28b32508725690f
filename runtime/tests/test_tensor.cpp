// Native tests of the slim tensor and the core shims: dtype table, strides, refcounted storage
// (borrowed deleter called exactly once at the last release, views keep storage alive), errors.
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.h"
#include "aoti_host/error.h"
#include "aoti_host/shims.h"
#include "aoti_host/tensor.h"

using aoti_host::Tensor;

namespace {

#define EXPECT_OK(call) EXPECT((call) == AOTI_TORCH_SUCCESS)

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

void test_dtype_table() {
  EXPECT(aoti_host::element_size(6) == 4);
  EXPECT(aoti_host::element_size(7) == 8);
  EXPECT(aoti_host::element_size(5) == 2);
  EXPECT(aoti_host::element_size(15) == 2);
  EXPECT(aoti_host::element_size(11) == 1);
  EXPECT(aoti_host::element_size(10) == 16);
  EXPECT(aoti_host::element_size(27) == 2);
  EXPECT(aoti_host::element_size(24) == 1);
  EXPECT(std::strcmp(aoti_host::dtype_name(6), "float32") == 0);
  EXPECT(std::strcmp(aoti_host::dtype_name(15), "bfloat16") == 0);
  EXPECT(std::strcmp(aoti_host::dtype_name(99), "dtype(99)") == 0);
  EXPECT(aoti_host::dtype_is_supported(5) && aoti_host::dtype_is_supported(11) && aoti_host::dtype_is_supported(0));
  EXPECT(!aoti_host::dtype_is_supported(9) && !aoti_host::dtype_is_supported(24) && !aoti_host::dtype_is_supported(99));
  bool threw = false;
  try {
    aoti_host::element_size(99);
  } catch (const aoti_host::Error& e) {
    threw = contains(e.what(), "99");
  }
  EXPECT(threw);
  // Shim constants are torch's codes.
  EXPECT(aoti_torch_dtype_float32() == 6 && aoti_torch_dtype_bfloat16() == 15 && aoti_torch_dtype_uint16() == 27);
  EXPECT(aoti_torch_dtype_float8_e8m0fnu() == 44 && aoti_torch_dtype_bool() == 11);
  EXPECT(aoti_torch_device_type_cpu() == 0 && aoti_torch_device_type_cuda() == 1 && aoti_torch_device_type_meta() == 14);
  EXPECT(aoti_torch_device_type_privateuse1() == 20 && aoti_torch_layout_strided() == 0 && aoti_torch_layout_jagged() == 7);
  EXPECT(aoti_torch_dtype_element_size(7) == 8 && aoti_torch_dtype_element_size(1000) == 0);
}

void test_strides() {
  EXPECT((Tensor::contiguous_strides({2, 3, 4}) == std::vector<int64_t>{12, 4, 1}));
  EXPECT((Tensor::contiguous_strides({2, 0, 4}) == std::vector<int64_t>{4, 4, 1}));
  EXPECT(Tensor::contiguous_strides({}).empty());
  std::unique_ptr<Tensor> t(Tensor::empty_strided(6, {2, 3}, {3, 1}));
  EXPECT(t->is_contiguous() && t->numel() == 6 && t->dim() == 2 && t->storage_nbytes() == 24);
  EXPECT(reinterpret_cast<uintptr_t>(t->data_ptr()) % 64 == 0);
  std::unique_ptr<Tensor> tt(t->alias({3, 2}, {1, 3}, 0));
  EXPECT(!tt->is_contiguous());
  std::unique_ptr<Tensor> ones(t->alias({1, 3}, {99, 1}, 3));  // size-1 dims ignore their stride
  EXPECT(ones->is_contiguous());
  EXPECT(static_cast<char*>(ones->data_ptr()) == static_cast<char*>(t->data_ptr()) + 12);
  // A strided (padded) layout allocates its whole extent.
  std::unique_ptr<Tensor> padded(Tensor::empty_strided(7, {2, 3}, {5, 1}));
  EXPECT(padded->storage_nbytes() == (5 + 3) * 8);
  // clone_contiguous of a transposed view.
  float* d = static_cast<float*>(t->data_ptr());
  for (int i = 0; i < 6; ++i) d[i] = static_cast<float>(i);
  std::unique_ptr<Tensor> c(tt->clone_contiguous());
  const float* cd = static_cast<const float*>(c->data_ptr());
  const float want[] = {0, 3, 1, 4, 2, 5};
  EXPECT(c->is_contiguous() && std::memcmp(cd, want, sizeof want) == 0);
  EXPECT(c->data_ptr() != t->data_ptr());
  // Views past the end of owned storage are refused.
  bool threw = false;
  try {
    std::unique_ptr<Tensor> bad(t->alias({4, 3}, {3, 1}, 0));
  } catch (const aoti_host::Error& e) {
    threw = contains(e.what(), "storage has 24");
  }
  EXPECT(threw);
}

int g_deleted = 0;
void count_delete(void* ctx) {
  ++g_deleted;
  *static_cast<int*>(ctx) += 1;
}

void test_lifetime() {
  float buf[12] = {};
  int ctx_calls = 0;
  Tensor* a = Tensor::from_blob(buf, 6, {3, 4}, {4, 1}, 0, 0, 0, count_delete, &ctx_calls);
  Tensor* v = a->alias({4}, {1}, 4);
  Tensor* v2 = v->alias({2}, {2}, 5);
  EXPECT(static_cast<float*>(v2->data_ptr()) == buf + 5);
  delete a;
  EXPECT(g_deleted == 0);
  delete v;
  EXPECT(g_deleted == 0);
  delete v2;
  EXPECT(g_deleted == 1 && ctx_calls == 1);

  // from_blob without a deleter never frees (stack memory here would crash if it did).
  { std::unique_ptr<Tensor> b(Tensor::from_blob(buf, 6, {12}, {1}, 0, 0, 0)); }

  // Through the shims: new_tensor_handle and _reinterpret_tensor keep the storage alive.
  g_deleted = 0;
  ctx_calls = 0;
  Tensor* owner = Tensor::from_blob(buf, 6, {12}, {1}, 0, 0, 0, count_delete, &ctx_calls);
  AtenTensorHandle h = aoti_host::to_handle(owner), h2 = nullptr, h3 = nullptr;
  EXPECT_OK(aoti_torch_new_tensor_handle(h, &h2));
  const int64_t sz[] = {2, 2}, st[] = {1, 2};
  EXPECT_OK(aoti_torch__reinterpret_tensor(h2, 2, sz, st, 3, &h3));
  void* p = nullptr;
  EXPECT_OK(aoti_torch_get_data_ptr(h3, &p));
  EXPECT(p == buf + 3);
  int64_t off = -1;
  EXPECT_OK(aoti_torch_get_storage_offset(h3, &off));
  EXPECT(off == 3);
  EXPECT_OK(aoti_torch_delete_tensor_object(h));
  EXPECT_OK(aoti_torch_delete_tensor_object(h2));
  EXPECT(g_deleted == 0);
  EXPECT_OK(aoti_torch_delete_tensor_object(h3));
  EXPECT(g_deleted == 1 && ctx_calls == 1);
}

// What a one-value getter of the core shims yields for `t`; the call must succeed (a counted failure if not).
template <typename T>
T got(AOTITorchError (*get)(AtenTensorHandle, T*), AtenTensorHandle t) {
  T v{};
  EXPECT_OK(get(t, &v));
  return v;
}

void test_core_shims() {
  const int64_t sizes[] = {2, 3}, strides[] = {1, 2};
  AtenTensorHandle t = nullptr;
  EXPECT_OK(aoti_torch_empty_strided(2, sizes, strides, 7, 0, 0, &t));
  int64_t* ps = nullptr;
  int64_t* pst = nullptr;
  EXPECT_OK(aoti_torch_get_sizes(t, &ps));
  EXPECT_OK(aoti_torch_get_strides(t, &pst));
  EXPECT(ps[0] == 2 && ps[1] == 3 && pst[0] == 1 && pst[1] == 2);
  int64_t v = 0;
  EXPECT_OK(aoti_torch_get_size(t, -1, &v));
  EXPECT(v == 3);
  EXPECT_OK(aoti_torch_get_stride(t, 1, &v));
  EXPECT(v == 2);
  EXPECT(aoti_torch_get_stride(t, 2, &v) == AOTI_TORCH_FAILURE);
  EXPECT(contains(aoti_host::last_error(), "aoti_torch_get_stride") && contains(aoti_host::last_error(), "out of range"));
  EXPECT(got(aoti_torch_get_dim, t) == 2);
  EXPECT(got(aoti_torch_get_numel, t) == 6);
  EXPECT(got(aoti_torch_get_storage_size, t) == 48);
  EXPECT(got(aoti_torch_get_dtype, t) == 7);
  EXPECT(got(aoti_torch_get_device_type, t) == 0);
  EXPECT(got(aoti_torch_get_device_index, t) == 0);
  EXPECT(got(aoti_torch_get_layout, t) == 0);
  bool b = true;
  EXPECT_OK(aoti_torch_is_contiguous(t, &b));
  EXPECT(!b);

  // copy_ from a contiguous float32 blob into the column-major float64 tensor (dtype conversion).
  float src[6] = {1, 2, 3, 4, 5, 6};
  const int64_t cs[] = {3, 1};
  AtenTensorHandle s = nullptr;
  EXPECT_OK(aoti_torch_create_tensor_from_blob(src, 2, sizes, cs, 0, 6, 0, 0, &s));
  EXPECT_OK(aoti_torch_copy_(t, s, 0));
  void* p = nullptr;
  EXPECT_OK(aoti_torch_get_data_ptr(t, &p));
  const double* d = static_cast<const double*>(p);
  EXPECT(d[0] == 1 && d[1] == 4 && d[2] == 2 && d[3] == 5 && d[4] == 3 && d[5] == 6);

  // clone is row-major; clone_preserve_strides keeps strides.
  AtenTensorHandle c = nullptr, cp = nullptr;
  EXPECT_OK(aoti_torch_clone(t, &c));
  EXPECT_OK(aoti_torch_get_strides(c, &pst));
  EXPECT(pst[0] == 3 && pst[1] == 1);
  EXPECT_OK(aoti_torch_get_data_ptr(c, &p));
  EXPECT(static_cast<double*>(p)[1] == 2 && static_cast<double*>(p)[3] == 4);
  EXPECT_OK(aoti_torch_clone_preserve_strides(t, &cp));
  EXPECT_OK(aoti_torch_get_strides(cp, &pst));
  EXPECT(pst[0] == 1 && pst[1] == 2);

  // item and scalar_to_tensor.
  AtenTensorHandle sc = nullptr;
  EXPECT_OK(aoti_torch_scalar_to_tensor_int32(-7, &sc));
  double dv = 0;
  EXPECT_OK(aoti_torch_item_float64(sc, &dv));
  EXPECT(dv == -7.0);
  EXPECT(aoti_torch_item_float64(t, &dv) == AOTI_TORCH_FAILURE);
  EXPECT(contains(aoti_host::last_error(), "6 elements"));

  // zero_ on a strided view.
  EXPECT_OK(aoti_torch_zero_(t));
  EXPECT_OK(aoti_torch_get_data_ptr(t, &p));
  EXPECT(static_cast<double*>(p)[5] == 0);

  // assign_tensors_out aliases.
  AtenTensorHandle al = nullptr;
  EXPECT_OK(aoti_torch_assign_tensors_out(s, &al));
  EXPECT_OK(aoti_torch_get_data_ptr(al, &p));
  EXPECT(p == src);

  for (AtenTensorHandle h : {t, s, c, cp, sc, al}) EXPECT_OK(aoti_torch_delete_tensor_object(h));
}

void test_errors() {
  const int64_t sizes[] = {2}, strides[] = {1};
  AtenTensorHandle t = nullptr;
  EXPECT(aoti_torch_empty_strided(1, sizes, strides, 6, 1, 0, &t) == AOTI_TORCH_FAILURE);
  EXPECT(contains(aoti_host::last_error(), "built without CUDA"));
  EXPECT(aoti_torch_empty_strided(1, sizes, strides, 77, 0, 0, &t) == AOTI_TORCH_FAILURE);
  EXPECT(contains(aoti_host::last_error(), "77"));
  float buf[2];
  EXPECT(aoti_torch_create_tensor_from_blob_v2(buf, 1, sizes, strides, 0, 6, 0, 0, &t, 3, nullptr, 0) ==
         AOTI_TORCH_FAILURE);
  EXPECT(contains(aoti_host::last_error(), "aoti_torch_create_tensor_from_blob_v2") &&
         contains(aoti_host::last_error(), "layout 3"));
  EXPECT_OK(aoti_torch_create_tensor_from_blob_v2(buf, 1, sizes, strides, 0, 6, 0, 0, &t, 0, nullptr, 0));
  EXPECT_OK(aoti_torch_delete_tensor_object(t));
  int64_t v;
  EXPECT(aoti_torch_get_dim(nullptr, &v) == AOTI_TORCH_FAILURE);
  EXPECT(contains(aoti_host::last_error(), "null"));

  // complex dtypes store and convert (to a real dtype: the real part, as ATen's copy_), but a dtype the
  // runtime does not compute with is refused, naming it.
  AtenTensorHandle a = nullptr, b = nullptr, u16 = nullptr;
  EXPECT_OK(aoti_torch_empty_strided(1, sizes, strides, 9, 0, 0, &a));
  EXPECT_OK(aoti_torch_empty_strided(1, sizes, strides, 6, 0, 0, &b));
  void* ap = nullptr;
  EXPECT_OK(aoti_torch_get_data_ptr(a, &ap));
  const float pairs[4] = {1.5f, -2.0f, -3.25f, 4.0f};
  std::memcpy(ap, pairs, sizeof pairs);
  EXPECT_OK(aoti_torch_copy_(b, a, 0));
  void* bp = nullptr;
  EXPECT_OK(aoti_torch_get_data_ptr(b, &bp));
  EXPECT(static_cast<float*>(bp)[0] == 1.5f && static_cast<float*>(bp)[1] == -3.25f);
  EXPECT_OK(aoti_torch_empty_strided(1, sizes, strides, 27, 0, 0, &u16));
  EXPECT(aoti_torch_copy_(u16, a, 0) == AOTI_TORCH_FAILURE);
  EXPECT(contains(aoti_host::last_error(), "uint16"));
  EXPECT_OK(aoti_torch_delete_tensor_object(u16));
  AtenTensorHandle a2 = nullptr;
  EXPECT_OK(aoti_torch_empty_strided(1, sizes, strides, 9, 0, 0, &a2));
  EXPECT_OK(aoti_torch_copy_(a2, a, 0));  // same dtype: a byte copy
  for (AtenTensorHandle h : {a, b, a2}) EXPECT_OK(aoti_torch_delete_tensor_object(h));

  // grad mode: thread-local, off by default.
  EXPECT(!aoti_torch_grad_mode_is_enabled());
  aoti_torch_grad_mode_set_enabled(true);
  EXPECT(aoti_torch_grad_mode_is_enabled());
  aoti_torch_grad_mode_set_enabled(false);

  // aoti_torch_check throws a std::exception carrying msg, func and file:line.
  bool caught = false;
  try {
    aoti_torch_check(false, "kernel0", "model.cpp", 42, "index out of bounds");
  } catch (const std::exception& e) {
    caught = contains(e.what(), "index out of bounds") && contains(e.what(), "kernel0") &&
             contains(e.what(), "model.cpp:42");
  }
  EXPECT(caught);
  aoti_torch_check(true, "f", "x.cpp", 1, "never");
  aoti_torch_warn("f", "x.cpp", 7, "a warning from a test");
}

}  // namespace

int main() {
  test_dtype_table();
  test_strides();
  test_lifetime();
  test_core_shims();
  test_errors();
  return test_result("test_tensor");
}
