// Native tests of the CPU fallbacks on small hand-computed cases, with strided operands and outputs.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "check.h"
#include "aoti_host/error.h"
#include "aoti_host/shims.h"

namespace {

#define EXPECT_OK(call)                                                                            \
  do {                                                                                             \
    if ((call) != AOTI_TORCH_SUCCESS) {                                                            \
      std::printf("FAIL: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, aoti_host::last_error().c_str()); \
      ++g_failures;                                                                                \
    }                                                                                              \
  } while (0)

AtenTensorHandle blob(void* data, std::vector<int64_t> sizes, std::vector<int64_t> strides, int32_t dtype,
                      int64_t offset = 0) {
  AtenTensorHandle h = nullptr;
  EXPECT_OK(aoti_torch_create_tensor_from_blob(data, static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(),
                                               offset, dtype, 0, 0, &h));
  return h;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

void test_mm() {
  // A = [[1,2,3],[4,5,6]] stored transposed (column-major); B = [[1,0],[0,1],[1,1]] with row stride 4.
  double a_store[6] = {1, 4, 2, 5, 3, 6};
  double b_store[12] = {1, 0, 9, 9, 0, 1, 9, 9, 1, 1, 9, 9};
  double out_store[8] = {0};
  AtenTensorHandle a = blob(a_store, {2, 3}, {1, 2}, 7);
  AtenTensorHandle b = blob(b_store, {3, 2}, {4, 1}, 7);
  AtenTensorHandle out = blob(out_store, {2, 2}, {1, 4}, 7, 1);  // column-major output, offset 1
  EXPECT_OK(aoti_torch_cpu_mm_out(out, a, b));
  // A@B = [[4,5],[10,11]]
  EXPECT(out_store[1] == 4 && out_store[2] == 10 && out_store[5] == 5 && out_store[6] == 11);
  EXPECT(out_store[0] == 0 && out_store[3] == 0);

  // addmm with a broadcast bias (1-d, length 2): beta*bias + alpha*A@B.
  double bias[2] = {100, 200};
  AtenTensorHandle s = blob(bias, {2}, {1}, 7);
  double o2[4];
  AtenTensorHandle out2 = blob(o2, {2, 2}, {2, 1}, 7);
  EXPECT_OK(aoti_torch_cpu_addmm_out(out2, s, a, b, 0.5, 2.0));
  EXPECT(o2[0] == 58 && o2[1] == 110 && o2[2] == 70 && o2[3] == 122);

  // beta == 0 ignores self even when it holds NaN.
  double nanb[2] = {NAN, NAN};
  AtenTensorHandle sn = blob(nanb, {2}, {1}, 7);
  EXPECT_OK(aoti_torch_cpu_addmm_out(out2, sn, a, b, 0.0, 1.0));
  EXPECT(o2[0] == 4 && o2[3] == 11);

  // Shape errors name the shim and the shapes.
  float x[64], y[120], z[32];
  AtenTensorHandle m1 = blob(x, {4, 16}, {16, 1}, 6), m2 = blob(y, {15, 8}, {8, 1}, 6), o = blob(z, {4, 8}, {8, 1}, 6);
  EXPECT(aoti_torch_cpu_mm_out(o, m1, m2) == AOTI_TORCH_FAILURE);
  EXPECT(aoti_host::last_error() == "aoti_torch_cpu_mm_out: mat1 is 4x16, mat2 is 15x8: inner dimensions differ");
  EXPECT(aoti_torch_cpu_mm_out(o, m1, a) == AOTI_TORCH_FAILURE);  // float64 vs float32 also inner-dim mismatch first
  for (AtenTensorHandle h : {a, b, out, s, out2, sn, m1, m2, o}) EXPECT_OK(aoti_torch_delete_tensor_object(h));
}

void test_mm_low_precision() {
  // bfloat16 1.0 = 0x3F80, 2.0 = 0x4000, 3.0 = 0x4040; float16 1.0 = 0x3C00, 2.0 = 0x4000.
  uint16_t a[2] = {0x3F80, 0x4000};  // [1, 2] as 1x2
  uint16_t b[2] = {0x4040, 0x3F80};  // [3, 1] as 2x1
  uint16_t o[1] = {0};
  AtenTensorHandle ha = blob(a, {1, 2}, {2, 1}, 15), hb = blob(b, {2, 1}, {1, 1}, 15), ho = blob(o, {1, 1}, {1, 1}, 15);
  EXPECT_OK(aoti_torch_cpu_mm_out(ho, ha, hb));
  EXPECT(o[0] == 0x40A0);  // 5.0
  uint16_t h[2] = {0x3C00, 0x4000}, hw[2] = {0x4000, 0x4000}, hout[1] = {0};
  AtenTensorHandle h1 = blob(h, {1, 2}, {2, 1}, 5), h2 = blob(hw, {2, 1}, {1, 1}, 5), h3 = blob(hout, {1, 1}, {1, 1}, 5);
  EXPECT_OK(aoti_torch_cpu_mm_out(h3, h1, h2));
  EXPECT(hout[0] == 0x4600);  // 6.0
  for (AtenTensorHandle x : {ha, hb, ho, h1, h2, h3}) EXPECT_OK(aoti_torch_delete_tensor_object(x));
}

void test_bmm() {
  // Two batches of 1x2 @ 2x1, batch stride of mat2 is 3 (padding).
  float s[4] = {1, 2, 3, 4};
  float m[6] = {1, 1, -1, 2, 0, -1};
  float o[2] = {0, 0};
  AtenTensorHandle hs = blob(s, {2, 1, 2}, {2, 2, 1}, 6), hm = blob(m, {2, 2, 1}, {3, 1, 1}, 6),
                   ho = blob(o, {2, 1, 1}, {1, 1, 1}, 6);
  EXPECT_OK(aoti_torch_cpu_bmm_out(ho, hs, hm));
  EXPECT(o[0] == 3 && o[1] == 6);
  for (AtenTensorHandle x : {hs, hm, ho}) EXPECT_OK(aoti_torch_delete_tensor_object(x));
}

void test_conv() {
  // conv1d: input [1,1,4] = [1,2,3,4], weight [1,1,2] = [1,-1], bias 10, padding 1, stride 2.
  // padded: [0,1,2,3,4,0]; windows at 0,2,4: (0-1),(2-3),(4-0) -> -1,-1,4; +10 -> 9,9,14.
  float x[4] = {1, 2, 3, 4}, w[2] = {1, -1}, bias[1] = {10};
  AtenTensorHandle hx = blob(x, {1, 1, 4}, {4, 4, 1}, 6), hw = blob(w, {1, 1, 2}, {2, 2, 1}, 6),
                   hb = blob(bias, {1}, {1}, 6);
  const int64_t st[] = {2}, pad[] = {1}, dil[] = {1}, op[] = {0};
  AtenTensorHandle out = nullptr;
  EXPECT_OK(aoti_torch_cpu_convolution(hx, hw, &hb, st, 1, pad, 1, dil, 1, 0, op, 1, 1, &out));
  int64_t* sizes = nullptr;
  void* p = nullptr;
  if (out != nullptr) {
    EXPECT_OK(aoti_torch_get_sizes(out, &sizes));
    EXPECT(sizes[0] == 1 && sizes[1] == 1 && sizes[2] == 3);
    EXPECT_OK(aoti_torch_get_data_ptr(out, &p));
    const float* o = static_cast<const float*>(p);
    EXPECT(o[0] == 9 && o[1] == 9 && o[2] == 14);
    EXPECT_OK(aoti_torch_delete_tensor_object(out));
  }

  // Transposed conv1d: input [1,1,2] = [1,2], weight [1,1,2] = [1,1], stride 2 -> [1,1,2,2]; no bias.
  float tx[2] = {1, 2}, tw[2] = {1, 1};
  AtenTensorHandle htx = blob(tx, {1, 1, 2}, {2, 2, 1}, 6), htw = blob(tw, {1, 1, 2}, {2, 2, 1}, 6);
  const int64_t pad0[] = {0};
  out = nullptr;
  EXPECT_OK(aoti_torch_cpu_convolution(htx, htw, nullptr, st, 1, pad0, 1, dil, 1, 1, op, 1, 1, &out));
  if (out != nullptr) {
    EXPECT_OK(aoti_torch_get_data_ptr(out, &p));
    const float* o = static_cast<const float*>(p);
    EXPECT(o[0] == 1 && o[1] == 1 && o[2] == 2 && o[3] == 2);
    EXPECT_OK(aoti_torch_delete_tensor_object(out));
  }

  // conv2d, groups=2, channels-last input [1,2,2,2]; weight [2,1,1,1] = [2,3]: out channel c = w_c * x_c.
  // Logical x[0,c,h,w] = 10*c + 2*h + w stored NHWC.
  double xs[8];
  for (int h = 0; h < 2; ++h)
    for (int ww = 0; ww < 2; ++ww)
      for (int c = 0; c < 2; ++c) xs[(h * 2 + ww) * 2 + c] = 10 * c + 2 * h + ww;
  double w2[2] = {2, 3};
  AtenTensorHandle hx2 = blob(xs, {1, 2, 2, 2}, {8, 1, 4, 2}, 7), hw2 = blob(w2, {2, 1, 1, 1}, {1, 1, 1, 1}, 7);
  const int64_t one2[] = {1, 1}, zero2[] = {0, 0};
  out = nullptr;
  EXPECT_OK(aoti_torch_cpu_convolution(hx2, hw2, nullptr, one2, 2, zero2, 2, one2, 2, 0, zero2, 2, 2, &out));
  if (out != nullptr) {
    int64_t* strides = nullptr;
    EXPECT_OK(aoti_torch_get_strides(out, &strides));
    EXPECT(strides[0] == 8 && strides[1] == 1 && strides[2] == 4 && strides[3] == 2);  // channels-last out
    EXPECT_OK(aoti_torch_get_data_ptr(out, &p));
    const double* o = static_cast<const double*>(p);
    bool ok = true;
    for (int h = 0; h < 2; ++h)
      for (int ww = 0; ww < 2; ++ww)
        for (int c = 0; c < 2; ++c) ok = ok && o[(h * 2 + ww) * 2 + c] == w2[c] * (10 * c + 2 * h + ww);
    EXPECT(ok);
    EXPECT_OK(aoti_torch_delete_tensor_object(out));
  }

  // Errors: channel mismatch and kernel larger than the input.
  float big[9] = {};
  AtenTensorHandle hbig = blob(big, {1, 1, 3, 3}, {9, 9, 3, 1}, 6);
  EXPECT(aoti_torch_cpu_convolution(hx, hbig, nullptr, st, 1, pad, 1, dil, 1, 0, op, 1, 1, &out) == AOTI_TORCH_FAILURE);
  EXPECT(contains(aoti_host::last_error(), "aoti_torch_cpu_convolution") && contains(aoti_host::last_error(), "weight"));
  float k5[5] = {};
  AtenTensorHandle hk5 = blob(k5, {1, 1, 5}, {5, 5, 1}, 6);
  EXPECT(aoti_torch_cpu_convolution(hx, hk5, nullptr, st, 1, pad0, 1, dil, 1, 0, op, 1, 1, &out) == AOTI_TORCH_FAILURE);
  EXPECT(contains(aoti_host::last_error(), "smaller than the dilated kernel"));
  for (AtenTensorHandle h : {hx, hw, hb, htx, htw, hx2, hw2, hbig, hk5}) EXPECT_OK(aoti_torch_delete_tensor_object(h));
}

}  // namespace

int main() {
  test_mm();
  test_mm_low_precision();
  test_bmm();
  test_conv();
  return test_result("test_fallbacks");
}
