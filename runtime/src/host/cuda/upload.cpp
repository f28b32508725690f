// How blob weights reach the device (program-level, compiled into the runtime library, not the shims):
// the host's upload through a ring of pinned chunks (upload_to_device in aoti_host/cuda/cuda.h), the
// pinned copy of a blob for the plugin's own loader, and the AOTI_HOST_WEIGHT_UPLOAD choice between them.
//
// Why not one pinned copy of the whole blob: page-locking 134 MB took longer than uploading it (82 ms of
// cudaHostAlloc + memcpy against 3 ms of copy on the H200, bench/RESULTS.md). Why not the plugin's own
// loader: it allocates and then issues one synchronous cudaMemcpy per constant, each waiting for the last.
// Here the pinned ring is allocated once per process and reused; host threads fill its chunks in parallel
// (a mapped package faults its pages in on the way) while the copy engine moves the chunks filled before.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "aoti_host/log.h"
#include "base/crc32.h"
#include "shims/cuda/cuda_util.h"

namespace aoti_host {
namespace cuda {
namespace {

// Chunks in the pinned ring, kept for the process's later uploads: one being filled, one being copied (and
// CRC'd), and spares so the fill never waits for the copy engine, which moves a chunk ~10x faster than a
// host thread fills one.
constexpr size_t kSlots = 4;

// Tuning (bench/RESULTS.md, weight load): AOTI_HOST_UPLOAD_CHUNK_MB (chunk size, default 2) and
// AOTI_HOST_UPLOAD_THREADS (fill threads, default 2). What a user waits for is the load's wall time, and on the
// H200 machine (134 MB, the package in the page cache, 3 loads each) that is bound by reading the package's
// pages (5-6 GB/s, page faults included) and by pinning the ring (cudaHostAlloc costs ~0.5 ms per MB there):
// small chunks and a few fill threads win (2 MiB x 2 threads: 34 ms of weight load; 8 MiB x 1: 84 ms), while the
// copy engine runs far below its 55 GB/s either way.
size_t env_size(const char* name, size_t fallback, size_t lo, size_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || n < lo || n > hi) {
    log(LogLevel::Warning, "%s=%s: use an integer from %zu to %zu; using %zu", name, v, lo, hi, fallback);
    return fallback;
  }
  return static_cast<size_t>(n);
}

struct Ring {
  std::mutex use;  // one upload at a time uses the ring
  void* pinned[kSlots] = {};
  size_t chunk = 0;
  bool ready = false;
};

Ring& ring() {
  static Ring* r = new Ring();  // never destroyed: the driver may be gone at exit
  return *r;
}

// Fill of one chunk by `n` worker threads (slices of it), started by start() and awaited by wait(), so the
// caller computes the previous chunk's CRC while they copy.
class Fillers {
 public:
  explicit Fillers(size_t n) : count_(n) {
    for (size_t t = 0; t < n; ++t) workers_.emplace_back([this, t] { loop(t); });
  }
  size_t size() const { return count_; }
  ~Fillers() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void start(void* dst, const void* src, size_t n) {
    {
      std::lock_guard<std::mutex> g(m_);
      dst_ = static_cast<unsigned char*>(dst), src_ = static_cast<const unsigned char*>(src), n_ = n;
      pending_ = count_;
      ++generation_;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> g(m_);
    done_.wait(g, [this] { return pending_ == 0; });
  }

 private:
  void slice(size_t t) {
    const size_t per = (n_ + count_ - 1) / count_;
    const size_t lo = std::min(n_, t * per), hi = std::min(n_, lo + per);
    if (hi > lo) std::memcpy(dst_ + lo, src_ + lo, hi - lo);
  }
  void loop(size_t t) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
      }
      slice(t);
      {
        std::lock_guard<std::mutex> g(m_);
        --pending_;
      }
      done_.notify_one();
    }
  }
  size_t count_;
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_, done_;
  uint64_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
  unsigned char* dst_ = nullptr;
  const unsigned char* src_ = nullptr;
  size_t n_ = 0;
};

}  // namespace

void device_free(void* ptr) {
  if (ptr != nullptr && cudaFree(ptr) != cudaSuccess) cudaGetLastError();
}

void* upload_to_device(const void* src, size_t size, int device, void* stream_ptr, UploadTimes* times,
                       uint32_t* crc) {
  const auto t0 = std::chrono::steady_clock::now();
  const OnDevice on(device);  // the allocation and the copies are the device's; the caller's device is restored
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  void* dst = nullptr;
  AOTI_CUDA_CHECK(cudaMalloc(&dst, size == 0 ? 1 : size));
  Ring& r = ring();
  std::lock_guard<std::mutex> hold(r.use);
  if (!r.ready) r.chunk = env_size("AOTI_HOST_UPLOAD_CHUNK_MB", 2, 1, 1024) << 20;
  const size_t kChunk = r.chunk;
  if (!r.ready) {
    for (size_t s = 0; s < kSlots; ++s) {
      // Portable: one ring serves uploads to every device of the process, whichever device allocated it.
      if (cudaHostAlloc(&r.pinned[s], kChunk, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        for (size_t k = 0; k < s; ++k) cudaFreeHost(r.pinned[k]), r.pinned[k] = nullptr;
        log(LogLevel::Warning, "cuda: cannot allocate %zu bytes of pinned memory; uploading weights from pageable memory",
            kSlots * kChunk);
        if (crc != nullptr) *crc = crc32(*crc, static_cast<const unsigned char*>(src), size);
        const cudaError_t rc = cudaMemcpyAsync(dst, src, size, cudaMemcpyHostToDevice, stream);
        if (rc == cudaSuccess) AOTI_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (rc != cudaSuccess) device_free(dst), check(rc, "cudaMemcpyAsync (weights)");
        if (times) {
          times->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          times->dma_s = times->wall_s, times->chunks = 1, times->chunk_bytes = 0, times->threads = 0;
        }
        return dst;
      }
    }
    r.ready = true;
  }
  cudaEvent_t start[kSlots], done[kSlots];
  for (size_t s = 0; s < kSlots; ++s) {
    AOTI_CUDA_CHECK(cudaEventCreate(&start[s]));
    AOTI_CUDA_CHECK(cudaEventCreate(&done[s]));
  }
  const size_t chunks = (size + kChunk - 1) / kChunk;
  const size_t hw = std::max<unsigned>(1, std::thread::hardware_concurrency());
  Fillers fillers(std::min<size_t>(env_size("AOTI_HOST_UPLOAD_THREADS", 2, 1, std::max<size_t>(64, hw)),
                                   std::max<size_t>(1, chunks)));
  double dma_ms = 0;
  std::vector<bool> in_flight(kSlots, false);
  auto settle = [&](size_t s) {  // waits for slot s's copy and adds its time
    if (!in_flight[s]) return;
    AOTI_CUDA_CHECK(cudaEventSynchronize(done[s]));
    float ms = 0;
    AOTI_CUDA_CHECK(cudaEventElapsedTime(&ms, start[s], done[s]));
    dma_ms += ms;
    in_flight[s] = false;
  };
  const auto* from = static_cast<const unsigned char*>(src);
  auto* to = static_cast<unsigned char*>(dst);
  auto span = [&](size_t c) { return std::min(kChunk, size - c * kChunk); };
  bool filling = false;
  try {
    // A pipeline: the fill threads copy chunk c+1 from the source into its pinned slot while the copy engine
    // moves chunk c to the device and this thread computes chunk c's CRC from the same (cache-warm) bytes.
    if (chunks > 0) fillers.start(r.pinned[0], from, span(0)), filling = true;
    for (size_t c = 0; c < chunks; ++c) {
      const size_t s = c % kSlots, off = c * kChunk, n = span(c);
      fillers.wait();
      filling = false;
      if (c + 1 < chunks) {
        const size_t next = (c + 1) % kSlots;
        settle(next);  // the chunk that used that slot kSlots ago is on the device
        fillers.start(r.pinned[next], from + off + n, span(c + 1));
        filling = true;
      }
      AOTI_CUDA_CHECK(cudaEventRecord(start[s], stream));
      AOTI_CUDA_CHECK(cudaMemcpyAsync(to + off, r.pinned[s], n, cudaMemcpyHostToDevice, stream));
      AOTI_CUDA_CHECK(cudaEventRecord(done[s], stream));
      in_flight[s] = true;
      if (crc != nullptr) *crc = crc32(*crc, static_cast<const unsigned char*>(r.pinned[s]), n);
    }
    for (size_t s = 0; s < kSlots; ++s) settle(s);
  } catch (...) {
    if (filling) fillers.wait();  // no thread writes a slot after this
    cudaStreamSynchronize(stream);
    cudaGetLastError();
    for (size_t s = 0; s < kSlots; ++s) cudaEventDestroy(start[s]), cudaEventDestroy(done[s]);
    device_free(dst);
    throw;
  }
  for (size_t s = 0; s < kSlots; ++s) cudaEventDestroy(start[s]), cudaEventDestroy(done[s]);
  if (times) {
    times->dma_s = dma_ms / 1e3;
    times->chunks = chunks;
    times->chunk_bytes = kChunk;
    times->threads = fillers.size();
    times->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return dst;
}

WeightPrefetch::WeightPrefetch(const void* src, size_t size, std::shared_ptr<const void> source, int device,
                               void* stream)
    : src_(src), size_(size), source_(std::move(source)) {
  worker_ = std::thread([this, device, stream] {
    try {
      mem_ = upload_to_device(src_, size_, device, stream, &times_, &crc_);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

void WeightPrefetch::wait() {
  if (worker_.joinable()) worker_.join();
}

WeightPrefetch::~WeightPrefetch() {
  wait();
  device_free(mem_);
}

void* WeightPrefetch::take(UploadTimes* times, uint32_t* crc) {
  wait();
  if (error_) std::rethrow_exception(error_);
  if (times != nullptr) *times = times_;
  if (crc != nullptr) *crc = crc_;
  void* mem = mem_;
  mem_ = nullptr;
  return mem;
}

PinnedBuffer::~PinnedBuffer() {
  if (data != nullptr) cudaFreeHost(data);
}

std::unique_ptr<PinnedBuffer> pinned_copy(const void* data, size_t size) {
  auto buf = std::make_unique<PinnedBuffer>();
  if (cudaHostAlloc(&buf->data, size == 0 ? 1 : size, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    buf->data = nullptr;
    return nullptr;
  }
  buf->size = size;
  std::memcpy(buf->data, data, size);
  return buf;
}

UploadMode upload_mode() {
  const char* v = std::getenv("AOTI_HOST_WEIGHT_UPLOAD");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "host") == 0) return UploadMode::Host;
  if (std::strcmp(v, "stage") == 0) return UploadMode::Stage;
  if (std::strcmp(v, "pageable") == 0) return UploadMode::Pageable;
  log(LogLevel::Warning, "AOTI_HOST_WEIGHT_UPLOAD=%s: use host, stage or pageable; using host", v);
  return UploadMode::Host;
}

const char* upload_mode_name(UploadMode mode) {
  return mode == UploadMode::Host ? "host" : mode == UploadMode::Stage ? "stage" : "pageable";
}

}  // namespace cuda
}  // namespace aoti_host
