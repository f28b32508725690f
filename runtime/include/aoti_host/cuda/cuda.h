// The CUDA side of the host runtime, as the rest of the runtime sees it. No CUDA header here: the
// CPU translation units include this only under `#if CUDA_AVAILABLE`, and streams travel as void*.
//
// Memory: device tensors come from a stream-ordered allocator (cudaMallocAsync on the calling
// thread's current stream, from the device's default pool with its release threshold raised, so freed
// blocks are reused without going back to the driver). While a CUDA graph is being captured on a
// thread, that thread's allocations come from the graph's arena instead (fixed addresses for the
// graph's lifetime; freed when the graph is).
//
// Streams: each thread has a current stream per device (the legacy default stream until a stream
// guard sets another); the shims launch on it, as torch's getCurrentCUDAStream does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "aoti_host/tensor.h"

namespace aoti_host {
namespace cuda {

// Throws Error with the CUDA error string and the call that failed.
void check(int code, const char* what);

// Devices: everything the runtime does for a program on cuda:N (allocations, copies, kernel launches, library
// handles, graph capture and replay, frees) runs with N current on the calling thread, and the device the
// caller had current is restored before control returns to it (OnDevice, MethodState::Scope).
int device_count();  // visible devices (CUDA_VISIBLE_DEVICES applies); 0 without a driver or a GPU
// Throws Error naming the visible count and the fix when cuda:device_index is not a device of this process:
// AOTI_HOST_INVALID_ARGUMENT when some devices are visible (a wrong index), AOTI_HOST_NOT_SUPPORTED when none is.
void require_device(int32_t device_index, const char* what);
int current_device();
void set_device(int device);

// Makes `device` current on the calling thread for the guard's life, then restores the device it found (no
// CUDA call beyond the first read when it already is current).
class OnDevice {
 public:
  explicit OnDevice(int device);
  ~OnDevice();
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int prev_, device_;
};

void* current_stream(int device);  // cudaStream_t of this thread's current stream on `device`
void set_current_stream(int device, void* stream);

// Stream-ordered device memory. `free` runs on the thread's current stream of `device` at free time.
void* allocate(size_t nbytes, int device);
void release(void* ptr, int device);

// Owned device storage for Tensor::empty_strided: returns the pointer and sets the deleter to call.
void* allocate_for_tensor(size_t nbytes, int device, void (**deleter)(void*), void** ctx);

// Copies src into dst (same sizes; same dtype), any strides, either side on the host or the device.
// Runs on the current stream of the device involved; host<->device copies are synchronous.
void copy(Tensor& dst, const Tensor& src);
// A contiguous copy of t on its device.
Tensor* clone_contiguous(const Tensor& t);
// A host copy of a tensor (contiguous), synchronous.
Tensor* to_host(const Tensor& t);
// Fills with zero bytes on t's device.
void zero(Tensor& t);

// Whether the n bytes at a and at b (device memory of `device`) are equal: a kernel compares them on the
// thread's current stream of `device` and writes a flag, the one thing downloaded (4 bytes; waits for that
// stream). Any n, 0 included, any alignment. Nothing of a or b goes through host memory.
bool same_bytes(const void* a, const void* b, size_t n, int device);
// Makes `stream` wait for the work queued on `after` so far (an event recorded there; nothing when they are
// the same stream). Both are streams of the current device.
void stream_wait(void* stream, void* after);

// Per-thread capture arena for CUDA graphs (shims/cuda/arena.h; host/cuda/method_state.cpp captures the graphs).
class Arena;
void set_thread_arena(Arena* arena);

// Weight upload (blob weights placed by the host, runtime/src/host/weights.h): `size` bytes of host memory
// (pageable: a mapped package or weights file) into a new device allocation on `device`, freed with
// device_free. Host threads copy the data into a ring of pinned chunks while the copy engine moves the
// chunks filled before, in order, on `stream`; returns when everything is on the device.
// dma_s: the copy engine's time (CUDA events around each chunk's copy, summed); wall_s: the whole call,
// allocation and host copies included.
// chunks, chunk_bytes, threads: what the ring used (chunk_bytes 0: no pinned ring, one pageable copy).
struct UploadTimes {
  double wall_s = 0, dma_s = 0;
  size_t chunks = 0, chunk_bytes = 0, threads = 0;
};
// crc (optional): the CRC-32 of the bytes uploaded, continued from *crc, computed from the pinned chunks in
// the same pass (the source is read once).
void* upload_to_device(const void* src, size_t size, int device, void* stream, UploadTimes* times,
                       uint32_t* crc = nullptr);
void device_free(void* ptr);

// upload_to_device on a thread of its own, started while the load goes on (storing and opening the plugin,
// creating its container), with the CRC-32 of the bytes computed on the way. take() waits for it and hands
// over the device memory (the caller frees it with device_free), or rethrows the upload's error. The
// destructor waits too, and frees memory nobody took.
class WeightPrefetch {
 public:
  // source: what keeps [src, src + size) mapped until the upload is done (the package's archive)
  WeightPrefetch(const void* src, size_t size, std::shared_ptr<const void> source, int device, void* stream);
  ~WeightPrefetch();
  WeightPrefetch(const WeightPrefetch&) = delete;
  WeightPrefetch& operator=(const WeightPrefetch&) = delete;
  const void* source() const { return src_; }
  size_t size() const { return size_; }
  void* take(UploadTimes* times, uint32_t* crc);

 private:
  void wait();
  const void* src_;
  size_t size_;
  std::shared_ptr<const void> source_;
  void* mem_ = nullptr;
  UploadTimes times_;
  uint32_t crc_ = 0;
  std::exception_ptr error_;
  std::thread worker_;
};

// Pinned-host staging for weight uploads: a copy of [data, data+size) in page-locked memory, so the
// plugin's cudaMemcpy of it runs at the pinned host-to-device bandwidth. Null when pinning fails.
struct PinnedBuffer {
  void* data = nullptr;
  size_t size = 0;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
};
std::unique_ptr<PinnedBuffer> pinned_copy(const void* data, size_t size);

// How blob weights reach the device, AOTI_HOST_WEIGHT_UPLOAD=host (default: the host places them,
// upload_to_device, when the package records their layouts; else as stage), stage (the plugin's own
// loader, from a pinned copy of the blob) or pageable (the plugin's own loader, from where the blob is).
// (Pinning the blob in place with cudaHostRegister was measured and dropped: registering 134 MB took more
// than 120 s on an H200 host.)
enum class UploadMode { Host, Stage, Pageable };
UploadMode upload_mode();
const char* upload_mode_name(UploadMode mode);

// Everything a method loaded on a CUDA device keeps beyond its container: its stream, its graph, its counters.
class MethodState;
struct GraphStats {
  uint64_t captures = 0, replays = 0, eager_runs = 0;
  // Copies a replay made: caller inputs copied into graph-owned buffers, outputs copied out of graph memory.
  uint64_t input_copies = 0, output_copies = 0;
  std::string disabled_reason;  // why graphs are off, empty while they are on or not asked for
};

}  // namespace cuda
}  // namespace aoti_host
