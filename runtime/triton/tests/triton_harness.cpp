// Drives the Triton backend library the way Triton's server does, without the server (a fast unit test; the
// real tritonserver runs it in tests/integration/test_triton_server.py): this program provides the
// TRITONBACKEND_*/TRITONSERVER_* calls the backend imports (exported, so the backend opened RTLD_LOCAL binds
// them, as it binds libtritonserver.so in Triton), then runs the lifecycle: Initialize, ModelInitialize, ModelInstanceInitialize (KIND_CPU), one Execute of three
// requests, the finalizers (the backend's last).
//
//   triton_harness BACKEND.so MODEL_DIR VERSION ROWS OUT.bin [stack]
//
// Request 0: input "input" FP32 [ROWS, 16], element i = (i % 97) * 0.01 - 0.5; its output_0 is written raw
// to OUT.bin. Request 1: the same data as FP64 (wrong datatype). Request 2: FP32 [ROWS, 17] (outside the
// contract). With `stack`, the model has max_batch_size 4 and the Execute gets, after those three, request 3
// [2, 16] (element i = ((i + 3) % 97) * 0.01 - 0.5), request 4 [1, 16] (offset 4), request 5 [3, 16] (offset
// 5); each good response's output_0 is appended to OUT.bin in request order. Prints one line per response:
// "response K: ok [shape]" or "response K: error CODE: message", "run: N rows" per run the backend reports
// and "released K" per request; exits 0 when the lifecycle itself worked.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../triton_api.h"  // the declarations the backend is built against

struct TRITONSERVER_Error {
  TRITONSERVER_Error_Code code;
  std::string message;
};
struct TRITONSERVER_Message {
  std::string json;
};
struct TRITONBACKEND_Model {
  std::string repository;
  uint64_t version = 1;
  std::string config;
  void* state = nullptr;
};
struct TRITONBACKEND_ModelInstance {
  TRITONBACKEND_Model* model = nullptr;
  void* state = nullptr;
};
struct TRITONBACKEND_Input {
  std::string name;
  TRITONSERVER_DataType datatype;
  std::vector<int64_t> shape;
  std::vector<char> data;
};
struct TRITONBACKEND_Request {
  std::vector<TRITONBACKEND_Input> inputs;
  std::vector<std::string> outputs;
  int index = 0;
};
struct TRITONBACKEND_Output {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<char> data;
};
struct TRITONBACKEND_Response {
  TRITONBACKEND_Request* request = nullptr;
  std::vector<std::unique_ptr<TRITONBACKEND_Output>> outputs;
};

namespace {
std::vector<std::unique_ptr<TRITONBACKEND_Response>> g_sent;
std::vector<std::string> g_errors;
}  // namespace

#define EXPORT extern "C" __attribute__((visibility("default")))

// TRITONBACKEND_<Object>SetState and TRITONBACKEND_<Object>State: the backend's pointer kept in the object.
#define STATE_ACCESSORS(Object)                                                                       \
  EXPORT TRITONSERVER_Error* TRITONBACKEND_##Object##SetState(TRITONBACKEND_##Object* o, void* state) { \
    o->state = state;                                                                                 \
    return nullptr;                                                                                   \
  }                                                                                                   \
  EXPORT TRITONSERVER_Error* TRITONBACKEND_##Object##State(TRITONBACKEND_##Object* o, void** state) {   \
    *state = o->state;                                                                                \
    return nullptr;                                                                                   \
  }

EXPORT TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg) {
  return new TRITONSERVER_Error{code, msg ? msg : ""};
}
EXPORT void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error) { delete error; }
EXPORT const char* TRITONSERVER_DataTypeString(TRITONSERVER_DataType datatype) {
  return datatype == TRITONSERVER_TYPE_FP32 ? "FP32" : datatype == TRITONSERVER_TYPE_FP64 ? "FP64" : "OTHER";
}
EXPORT TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* m, const char** base,
                                                               size_t* size) {
  *base = m->json.data();
  *size = m->json.size();
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* m) {
  delete m;
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = TRITONBACKEND_API_VERSION_MAJOR;
  *minor = TRITONBACKEND_API_VERSION_MINOR;
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelRepository(TRITONBACKEND_Model* model, TRITONBACKEND_ArtifactType* type,
                                                         const char** location) {
  *type = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  *location = model->repository.c_str();
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* model, uint64_t* version) {
  *version = model->version;
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelConfig(TRITONBACKEND_Model* model, const uint32_t, TRITONSERVER_Message** out) {
  *out = new TRITONSERVER_Message{model->config};
  return nullptr;
}
STATE_ACCESSORS(Model)
EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* inst, TRITONBACKEND_Model** m) {
  *m = inst->model;
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance*, TRITONSERVER_InstanceGroupKind* k) {
  *k = TRITONSERVER_INSTANCEGROUPKIND_CPU;
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance*, int32_t* id) {
  *id = 0;
  return nullptr;
}
STATE_ACCESSORS(ModelInstance)
EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance*, TRITONBACKEND_Request*,
                                                                       const bool, const uint64_t, const uint64_t,
                                                                       const uint64_t, const uint64_t) {
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance*,
                                                                            const uint64_t rows, const uint64_t,
                                                                            const uint64_t, const uint64_t,
                                                                            const uint64_t) {
  std::printf("run: %llu rows\n", static_cast<unsigned long long>(rows));
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* r, uint32_t* count) {
  *count = static_cast<uint32_t>(r->inputs.size());
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex(TRITONBACKEND_Request* r, const uint32_t i,
                                                             TRITONBACKEND_Input** input) {
  if (i >= r->inputs.size()) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "input index");
  *input = &r->inputs[i];
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* in, const char** name,
                                                         TRITONSERVER_DataType* datatype, const int64_t** shape,
                                                         uint32_t* dims, uint64_t* byte_size, uint32_t* buffers) {
  *name = in->name.c_str();
  *datatype = in->datatype;
  *shape = in->shape.data();
  *dims = static_cast<uint32_t>(in->shape.size());
  *byte_size = in->data.size();
  *buffers = 2;  // two buffers, as Triton hands over a request assembled from several pieces
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* in, const uint32_t index, const void** buffer,
                                                     uint64_t* size, TRITONSERVER_MemoryType* mem, int64_t* mem_id) {
  const size_t half = in->data.size() / 2;
  *buffer = in->data.data() + (index == 0 ? 0 : half);
  *size = index == 0 ? half : in->data.size() - half;
  *mem = TRITONSERVER_MEMORY_CPU;
  *mem_id = 0;
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* r, uint32_t* count) {
  *count = static_cast<uint32_t>(r->outputs.size());
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request* r, const uint32_t i, const char** name) {
  *name = r->outputs.at(i).c_str();
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* r, uint32_t) {
  std::printf("released %d\n", r->index);
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response, TRITONBACKEND_Request* r) {
  *response = new TRITONBACKEND_Response{r, {}};
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* response, TRITONBACKEND_Output** out,
                                                        const char* name, const TRITONSERVER_DataType,
                                                        const int64_t* shape, const uint32_t dims) {
  response->outputs.push_back(std::make_unique<TRITONBACKEND_Output>());
  response->outputs.back()->name = name;
  response->outputs.back()->shape.assign(shape, shape + dims);
  *out = response->outputs.back().get();
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* out, void** buffer, const uint64_t size,
                                                      TRITONSERVER_MemoryType* mem, int64_t* mem_id) {
  out->data.resize(size);
  *buffer = out->data.data();
  *mem = TRITONSERVER_MEMORY_CPU;
  *mem_id = 0;
  return nullptr;
}
EXPORT TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* response, const uint32_t,
                                                      TRITONSERVER_Error* error) {
  const int k = response->request->index;
  if (error != nullptr) {
    std::printf("response %d: error %d: %s\n", k, static_cast<int>(error->code), error->message.c_str());
    delete error;
    delete response;
    return nullptr;
  }
  std::string shape;
  for (const auto& o : response->outputs)
    for (int64_t d : o->shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
  std::printf("response %d: ok [%s]\n", k, shape.c_str());
  g_sent.emplace_back(response);
  return nullptr;
}

namespace {
template <typename F>
F entry(void* h, const char* name) {
  F f = reinterpret_cast<F>(::dlsym(h, name));
  if (f == nullptr) {
    std::fprintf(stderr, "triton_harness: the backend lacks %s\n", name);
    std::exit(2);
  }
  return f;
}

bool failed(TRITONSERVER_Error* err, const char* what) {
  if (err == nullptr) return false;
  std::fprintf(stderr, "triton_harness: %s: %s\n", what, err->message.c_str());
  delete err;
  return true;
}

TRITONBACKEND_Input input(TRITONSERVER_DataType dt, int64_t rows, int64_t cols, int64_t offset = 0) {
  TRITONBACKEND_Input in{"input", dt, {rows, cols}, {}};
  for (int64_t i = 0; i < rows * cols; ++i) {
    double v = static_cast<double>((i + offset) % 97) * 0.01 - 0.5;
    if (dt == TRITONSERVER_TYPE_FP32) {
      float f = static_cast<float>(v);
      in.data.insert(in.data.end(), reinterpret_cast<char*>(&f), reinterpret_cast<char*>(&f) + sizeof f);
    } else {
      in.data.insert(in.data.end(), reinterpret_cast<char*>(&v), reinterpret_cast<char*>(&v) + sizeof v);
    }
  }
  return in;
}
}  // namespace

int main(int argc, char** argv) {
  const bool stack = argc == 7 && std::strcmp(argv[6], "stack") == 0;
  if (argc != 6 && !stack) {
    std::fprintf(stderr, "usage: triton_harness BACKEND.so MODEL_DIR VERSION ROWS OUT.bin [stack]\n");
    return 2;
  }
  void* backend = ::dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);  // as Triton opens backends
  if (backend == nullptr) {
    std::fprintf(stderr, "triton_harness: %s\n", ::dlerror());
    return 2;
  }
  using Init = TRITONSERVER_Error* (*)(TRITONBACKEND_Backend*);
  using ModelFn = TRITONSERVER_Error* (*)(TRITONBACKEND_Model*);
  using InstFn = TRITONSERVER_Error* (*)(TRITONBACKEND_ModelInstance*);
  using Exec = TRITONSERVER_Error* (*)(TRITONBACKEND_ModelInstance*, TRITONBACKEND_Request**, const uint32_t);
  TRITONBACKEND_Model model{argv[2], std::stoull(argv[3]),
                            std::string("{\"name\":\"mlp\",") + (stack ? "\"max_batch_size\":4," : "") +
                                "\"parameters\":{\"method\":{\"string_value\":\"forward\"}}}",
                            nullptr};
  TRITONBACKEND_ModelInstance inst{&model, nullptr};
  if (failed(entry<Init>(backend, "TRITONBACKEND_Initialize")(nullptr), "Initialize") ||
      failed(entry<ModelFn>(backend, "TRITONBACKEND_ModelInitialize")(&model), "ModelInitialize") ||
      failed(entry<InstFn>(backend, "TRITONBACKEND_ModelInstanceInitialize")(&inst), "ModelInstanceInitialize"))
    return 1;
  const int64_t rows = std::stoll(argv[4]);
  TRITONBACKEND_Request good{{input(TRITONSERVER_TYPE_FP32, rows, 16)}, {"output_0"}, 0};
  TRITONBACKEND_Request wrong_dtype{{input(TRITONSERVER_TYPE_FP64, rows, 16)}, {"output_0"}, 1};
  TRITONBACKEND_Request wrong_shape{{input(TRITONSERVER_TYPE_FP32, rows, 17)}, {"output_0"}, 2};
  TRITONBACKEND_Request more[] = {{{input(TRITONSERVER_TYPE_FP32, 2, 16, 3)}, {"output_0"}, 3},
                                  {{input(TRITONSERVER_TYPE_FP32, 1, 16, 4)}, {"output_0"}, 4},
                                  {{input(TRITONSERVER_TYPE_FP32, 3, 16, 5)}, {"output_0"}, 5}};
  TRITONBACKEND_Request* requests[] = {&good, &wrong_dtype, &wrong_shape, &more[0], &more[1], &more[2]};
  const uint32_t count = stack ? 6 : 3;
  if (failed(entry<Exec>(backend, "TRITONBACKEND_ModelInstanceExecute")(&inst, requests, count), "Execute")) return 1;
  FILE* f = std::fopen(argv[5], "wb");
  for (const auto& r : g_sent) {  // in request order: the backend sends the responses in that order
    if (f == nullptr || std::fwrite(r->outputs.at(0)->data.data(), 1, r->outputs.at(0)->data.size(), f) !=
                            r->outputs.at(0)->data.size()) {
      std::fprintf(stderr, "triton_harness: cannot write %s\n", argv[5]);
      return 1;
    }
  }
  if (f != nullptr) std::fclose(f);
  if (failed(entry<InstFn>(backend, "TRITONBACKEND_ModelInstanceFinalize")(&inst), "ModelInstanceFinalize") ||
      failed(entry<ModelFn>(backend, "TRITONBACKEND_ModelFinalize")(&model), "ModelFinalize") ||
      failed(entry<Init>(backend, "TRITONBACKEND_Finalize")(nullptr), "Finalize"))
    return 1;
  return 0;
}
