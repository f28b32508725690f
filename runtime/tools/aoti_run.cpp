// aoti-run: run an AOTInductor plugin (.pt2 package or plugin .so) on .npy inputs, write .npy outputs.
//
//   aoti-run MODEL.pt2|PLUGIN.so|METHODS_DIR|methods.json [--method NAME] [--weights BLOB] -i IN0.npy[:LAYOUT] ...
//            -o OUTDIR [--strict] [--repeat N] [--quiet]
//
// Exit codes come from the project's one exit-code table (toolchain/spec/exit_codes.toml, generated into
// aoti_host/exit_codes.h), which aoti-toolchain reads too: a failure gets the same code from both CLIs.
#include "aoti_host/build_info.h"
#include "aoti_host/c_api.h"
#include "aoti_host/device_name.h"
#include "aoti_host/dtypes.h"
#include "aoti_host/error.h"
#include "aoti_host/exit_codes.h"
#include "aoti_host/input_file.h"
#include "npy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <vector>

// The exported shims that read output handles. Declared here rather than through the generated
// shims.h so this file does not depend on generated code; the types are identical to it.
extern "C" {
struct AtenTensorOpaque;
typedef AtenTensorOpaque* AtenTensorHandle;
int32_t aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret);
int32_t aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret);
int32_t aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret);
int32_t aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret);
int32_t aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret);
int32_t aoti_torch_delete_tensor_object(AtenTensorHandle tensor);
int32_t aoti_torch_get_device_type(AtenTensorHandle tensor, int32_t* ret);
int32_t aoti_torch_create_tensor_from_blob(void* data, int64_t ndim, const int64_t* sizes_ptr,
                                           const int64_t* strides_ptr, int64_t storage_offset, int32_t dtype,
                                           int32_t device_type, int32_t device_index, AtenTensorHandle* ret);
}

namespace {

using aoti_host::exit_code_for_status;
using aoti_host::kExitBadInput;
using aoti_host::kExitFailed;
using aoti_host::kExitOk;
using aoti_host::kExitRunFailed;
using aoti_host::kExitUsage;

const char kUsageLine[] =
    "usage: aoti-run MODEL.pt2|PLUGIN.so|METHODS_DIR|methods.json [--method NAME] [--weights BLOB] "
    "-i IN0.npy[:LAYOUT] [-i IN1.npy ...] -o OUTDIR [--strict] [--repeat N [--warmup N]] [--device cpu|cuda[:N]] [--cuda-graphs] "
    "[--device-inputs] [--quiet]";

const char kHelp[] =
    "\n"
    "Runs an AOTInductor plugin on CPU: inputs from .npy files, outputs to OUTDIR/output_<name>.npy.\n"
    "\n"
    "  MODEL.pt2|PLUGIN.so   a .pt2 package or a compiled plugin .so\n"
    "  METHODS_DIR|methods.json  a program of several methods (one .pt2 each; weights shared)\n"
    "  --method NAME         the method to run (default: the first, forward when present)\n"
    "  --weights BLOB        weights blob for a plugin .so that keeps its weights outside\n"
    "  -i, --input FILE.npy[:LAYOUT]\n"
    "                        one per model input, in order. LAYOUT is the layout the plugin was built\n"
    "                        for (contiguous, channels_last, channels_last_3d or strides=S0,S1,...):\n"
    "                        needed only for a plugin without a contract; the array is converted to it\n"
    "  --strict              refuse inputs whose layout differs from the plugin's instead of converting\n"
    "  -o, --output DIR      where output_<name>.npy go: output_0.npy, ... or a dict's output_logits.npy\n"
    "                        (created if missing; also --output-dir)\n"
    "  --repeat N            after the first run, run N more times and print\n"
    "                        'latency_us: median=.. p10=.. p90=.. n=N'\n"
    "  --warmup N            with --repeat: N untimed runs before the timed ones (steady state: clocks,\n"
    "                        caches, graph capture)\n"
    "  --device DEV          cpu (default), cuda or cuda:N (a CUDA plugin, CUDA build of the runtime)\n"
    "  --device-inputs       with --device cuda: upload the inputs once and pass device memory (what a\n"
    "                        GPU server does; --repeat then times Run alone, not the input upload)\n"
    "  --cuda-graphs         with --device cuda: capture Run into a CUDA graph after warm-up, replay it\n"
    "                        (prints 'cuda_graphs: captures=.. replays=.. ...' at the end); replays\n"
    "                        hand out views of the graph's output memory, written before the next run\n"
    "  -q, --quiet           do not print one line per output\n"
    "  -h, --help            this text\n"
    "  --version             the version and the runtime's build configuration\n"
    "\n"
    "Only regular files are read (a FIFO, device or directory given as a model, weights or input is refused).\n"
    "\n";

// Carries an exit code and a message that already says what to do; thrown to main.
struct Failure {
  int code;
  std::string message;
};

[[noreturn]] void usage_error(const std::string& what) { throw Failure{kExitUsage, what + "\n" + kUsageLine}; }

struct Args {
  std::string model;
  std::string weights;
  bool has_weights = false;
  std::string method;
  std::vector<std::string> inputs;
  std::vector<std::string> layouts;  // per input: "" or the text after ':'
  std::string outdir;
  bool strict = false;
  bool has_outdir = false;
  long long repeat = 0;
  long long warmup = 0;
  bool quiet = false;
  bool help = false;
  bool version = false;
  std::string device = "cpu";
  aoti_host::DeviceName device_name;  // --device parsed
  bool cuda_graphs = false;
  bool device_inputs = false;
};

long long parse_repeat(const std::string& text, const char* option) {
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || n < 1 || n > 100000000) {
    usage_error(std::string(option) + " wants a positive integer (1..100000000), got '" + text + "'");
  }
  return n;
}

Args parse_args(int argc, char** argv) {
  Args a;
  bool has_model = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool inline_value = false;
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      const size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        inline_value = true;
      }
    }
    // Fetches the option's value: "--opt=V" or the next argument.
    auto take = [&](const char* name) -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) usage_error(std::string(name) + " needs a value");
      return argv[++i];
    };
    auto no_value = [&](const char* name) {
      if (inline_value) usage_error(std::string(name) + " takes no value");
    };
    if (arg == "-h" || arg == "--help") {
      no_value("--help");
      a.help = true;
      return a;
    } else if (arg == "--version") {
      no_value("--version");
      a.version = true;
      return a;
    } else if (arg == "-i" || arg == "--input") {
      std::string spec = take("-i");
      std::string layout;
      const size_t colon = spec.rfind(':');
      if (colon != std::string::npos) {
        const std::string tail = spec.substr(colon + 1);
        if (tail == "contiguous" || tail == "channels_last" || tail == "channels_last_3d" ||
            tail.rfind("strides=", 0) == 0) {
          layout = tail;
          spec = spec.substr(0, colon);
        }
      }
      a.inputs.push_back(spec);
      a.layouts.push_back(layout);
    } else if (arg == "--strict") {
      no_value("--strict");
      a.strict = true;
    } else if (arg == "-o" || arg == "--output-dir" || arg == "--output") {
      a.outdir = take("-o");
      a.has_outdir = true;
      if (a.outdir.empty()) usage_error("-o needs a directory, got ''");
    } else if (arg == "--weights") {
      a.weights = take("--weights");
      a.has_weights = true;
      if (a.weights.empty()) usage_error("--weights needs a file, got ''");
    } else if (arg == "--method") {
      a.method = take("--method");
      if (a.method.empty()) usage_error("--method needs a name, got ''");
    } else if (arg == "--repeat") {
      a.repeat = parse_repeat(take("--repeat"), "--repeat");
    } else if (arg == "--warmup") {
      a.warmup = parse_repeat(take("--warmup"), "--warmup");
    } else if (arg == "--device") {
      a.device = take("--device");
      std::string why;
      if (!aoti_host::parse_device_name(a.device.c_str(), &a.device_name, &why)) usage_error("--device: " + why);
    } else if (arg == "--device-inputs") {
      no_value("--device-inputs");
      a.device_inputs = true;
    } else if (arg == "--cuda-graphs") {
      no_value("--cuda-graphs");
      a.cuda_graphs = true;
    } else if (arg == "-q" || arg == "--quiet") {
      no_value("--quiet");
      a.quiet = true;
    } else if (!arg.empty() && arg[0] == '-') {
      usage_error("unknown option '" + std::string(argv[i]) + "'");
    } else if (has_model) {
      usage_error("unexpected argument '" + arg + "' (the model is '" + a.model +
                  "'; give inputs with -i FILE.npy)");
    } else {
      a.model = arg;
      has_model = true;
    }
  }
  if (!has_model) usage_error("no model given (a .pt2 package or a plugin .so)");
  if (!a.has_outdir) usage_error("no output directory given (-o OUTDIR)");
  if (a.cuda_graphs && !a.device_name.cuda) usage_error("--cuda-graphs needs --device cuda");
  if (a.device_inputs && !a.device_name.cuda) usage_error("--device-inputs needs --device cuda");
  if (a.warmup > 0 && a.repeat == 0) usage_error("--warmup needs --repeat (it runs before the timed runs)");
  return a;
}

// A model, weights blob or input must be a regular file: opened without blocking and checked by fstat
// on that descriptor (aoti_host::InputFile), so a FIFO or device is refused at once, never read.
void require_file(const std::string& path, const char* what) {
  try {
    const aoti_host::InputFile file(path, what);
  } catch (const aoti_host::Error& e) {
    throw Failure{exit_code_for_status(e.status()), e.what()};
  }
}

// What this command wrote: the output files, and the directories make_outdir created (deepest first).
// A command that fails removes them again, so a failed run leaves no partial result.
std::vector<std::string> g_written_files;
std::vector<std::string> g_created_dirs;

void remove_created_dirs() {
  for (const auto& f : g_written_files) ::unlink(f.c_str());
  for (const auto& d : g_created_dirs) ::rmdir(d.c_str());  // only succeeds while empty
  g_written_files.clear();
  g_created_dirs.clear();
}

// Creates OUTDIR (and its parents) and checks that files can be created in it, before the (possibly
// slow) load and run: an unusable -o is a bad input, found early, with nothing written.
void make_outdir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    throw Failure{kExitBadInput, dir + ": exists and is " + aoti_host::file_type_name(st.st_mode) +
                                     ", not a directory; choose another -o"};
  }
  for (std::filesystem::path p(dir); !p.empty() && ::lstat(p.c_str(), &st) != 0 && errno == ENOENT;
       p = p.parent_path()) {
    g_created_dirs.push_back(p.string());
    if (p == p.parent_path()) break;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Failure{kExitBadInput, dir + ": cannot create the output directory: " +
                                     (ec ? ec.message() : std::string("it is not a directory")) +
                                     "; choose another -o (a path under a directory you can write)"};
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw Failure{kExitBadInput, dir + ": the output directory is not writable (" + std::strerror(errno) +
                                     "); choose another -o or fix its permissions"};
  }
}

std::string join(const std::string& dir, const std::string& name) {
  return (!dir.empty() && dir.back() == '/') ? dir + name : dir + "/" + name;
}

const char* dtype_name(int32_t code) {
  const aoti_host::dtypes::Info* info = aoti_host::dtypes::find(code);  // generated from the spec
  return info != nullptr ? info->name : nullptr;
}

std::string dtype_label(int32_t code) {
  const char* name = dtype_name(code);
  return name != nullptr ? name : "dtype(" + std::to_string(code) + ")";
}

std::string shape_label(const std::vector<int64_t>& sizes) {
  std::string s = "[";
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (k > 0) s += ", ";
    s += std::to_string(sizes[k]);
  }
  return s + "]";
}

std::string last_error_or(int status) {
  const char* msg = aoti_host_last_error();
  if (msg != nullptr && *msg != '\0') return msg;
  const char* name = aoti_host_status_name(status);
  return std::string("status ") + (name != nullptr ? name : std::to_string(status));
}

struct ProgramDeleter {
  void operator()(aoti_host_program* p) const { aoti_host_program_free(p); }
};
using ProgramPtr = std::unique_ptr<aoti_host_program, ProgramDeleter>;

// Output handles of one run; the caller owns them, so they are deleted on every path.
class Outputs {
 public:
  explicit Outputs(size_t n) : handles_(n, nullptr) {}
  Outputs(const Outputs&) = delete;
  Outputs& operator=(const Outputs&) = delete;
  ~Outputs() { reset(); }
  AtenTensorHandle* data() { return handles_.data(); }
  AtenTensorHandle operator[](size_t k) const { return handles_[k]; }
  size_t size() const { return handles_.size(); }
  void reset() {
    for (auto& h : handles_) {
      if (h != nullptr) aoti_torch_delete_tensor_object(h);
      h = nullptr;
    }
  }

 private:
  std::vector<AtenTensorHandle> handles_;
};

void run_once(aoti_host_program* program, size_t method, const std::string& model,
              const std::vector<aoti_host_tensor_view>& views, Outputs& outputs) {
  const int status = aoti_host_program_run_method(program, method, nullptr, views.data(), views.size(), outputs.data(),
                                                  outputs.size());
  if (status == AOTI_HOST_OK) return;
  const int code = exit_code_for_status(status);
  if (code == kExitBadInput) throw Failure{code, "the inputs do not fit " + model + ": " + last_error_or(status)};
  throw Failure{code, model + ": the run failed: " + last_error_or(status)};
}

void check_shim(int32_t err, const char* shim, size_t k) {
  if (err != 0) {
    throw Failure{kExitFailed, std::string(shim) + " failed on output_" + std::to_string(k) +
                                   " (error " + std::to_string(err) + "); this is a runtime bug, please report it"};
  }
}

// The stem each output's file is named by (output_<stem>.npy), as toolchain/contract.py names them: the
// contract's output name without its "output_" prefix (0, 1 for positional outputs; logits, aux.0 for a dict's
// leaves). A name that is not a safe file stem, or stems that clash, fall back to positions, and so do a
// program without a contract and methods other than the first (the C API describes the first one's outputs).
std::vector<std::string> output_stems(aoti_host_program* program, size_t method, size_t count) {
  std::vector<std::string> stems;
  auto safe = [](const std::string& n) {
    if (n.empty() || n.size() > 128 || n[0] == '.' || n[0] == '-') return false;
    for (char c : n)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
    return true;
  };
  bool has_contract = false;  // without one, the plugin's own output names are buffer names, not leaves
  if (aoti_host_program_has_contract(program, &has_contract) != AOTI_HOST_OK) has_contract = false;
  for (size_t k = 0; has_contract && method == 0 && k < count; ++k) {
    aoti_host_tensor_spec spec{};
    if (aoti_host_program_output_spec(program, k, &spec) != AOTI_HOST_OK || spec.name == nullptr) break;
    std::string name = spec.name;
    if (name.rfind("output_", 0) == 0 && name.size() > 7) name = name.substr(7);
    if (!safe(name) || std::find(stems.begin(), stems.end(), name) != stems.end()) break;
    stems.push_back(name);
  }
  if (stems.size() != count) {
    stems.clear();
    for (size_t k = 0; k < count; ++k) stems.push_back(std::to_string(k));
  }
  return stems;
}

void write_output(AtenTensorHandle h, size_t k, const std::string& stem, const std::string& outdir, bool quiet) {
  int32_t device_type = 0;
  check_shim(aoti_torch_get_device_type(h, &device_type), "aoti_torch_get_device_type", k);
  if (device_type != 0) {  // a device output: write its host copy
    AtenTensorHandle host = nullptr;
    const int st = aoti_host_tensor_to_cpu(h, &host);
    if (st != AOTI_HOST_OK) throw Failure{exit_code_for_status(st), "cannot copy output_" + std::to_string(k) + " to the host: " + last_error_or(st)};
    Outputs keep(1);
    keep.data()[0] = host;
    return write_output(host, k, stem, outdir, quiet);
  }
  int32_t dtype = -1;
  int64_t dim = 0;
  int64_t* sizes_p = nullptr;
  int64_t* strides_p = nullptr;
  void* data = nullptr;
  check_shim(aoti_torch_get_dtype(h, &dtype), "aoti_torch_get_dtype", k);
  check_shim(aoti_torch_get_dim(h, &dim), "aoti_torch_get_dim", k);
  check_shim(aoti_torch_get_sizes(h, &sizes_p), "aoti_torch_get_sizes", k);
  check_shim(aoti_torch_get_strides(h, &strides_p), "aoti_torch_get_strides", k);
  check_shim(aoti_torch_get_data_ptr(h, &data), "aoti_torch_get_data_ptr", k);
  if (dim < 0 || (dim > 0 && (sizes_p == nullptr || strides_p == nullptr))) {
    throw Failure{kExitFailed, "output_" + std::to_string(k) + " has no valid sizes/strides (dim " +
                                   std::to_string(dim) + "); this is a runtime bug, please report it"};
  }
  const std::vector<int64_t> sizes(sizes_p, sizes_p + dim);
  const std::vector<int64_t> strides(strides_p, strides_p + dim);
  const std::string name = "output_" + stem;
  const std::string path = join(outdir, name + ".npy");
  try {
    aoti_host::write_npy(path, dtype, sizes, strides, data);  // bfloat16: '<V2', read with ml_dtypes
    g_written_files.push_back(path);
  } catch (const aoti_host::Error& e) {  // an OUTDIR that refuses the file: a bad -o, nothing half-written
    throw Failure{kExitBadInput, std::string("cannot write ") + name + " (" + dtype_label(dtype) +
                                   shape_label(sizes) + "): " + e.what()};
  }
  if (!quiet) {
    std::printf("%s: %s%s -> %s\n", name.c_str(), dtype_label(dtype).c_str(), shape_label(sizes).c_str(),
                path.c_str());
  }
}

// numpy's default (linear) percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.size() == 1) return sorted[0];
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

// Strides for a -i FILE:LAYOUT suffix and the array's sizes (only their order matters to the runtime).
std::vector<int64_t> layout_strides(const std::string& layout, const std::string& file,
                                    const std::vector<int64_t>& sizes) {
  const std::string arg = "-i " + file + ":" + layout;
  const size_t nd = sizes.size();
  auto prod = [&](std::initializer_list<size_t> dims) {
    int64_t p = 1;
    for (size_t d : dims) p *= std::max<int64_t>(sizes[d], 1);
    return p;
  };
  if (layout == "contiguous") {
    std::vector<int64_t> st(nd, 1);
    for (size_t d = nd; d-- > 1;) st[d - 1] = st[d] * std::max<int64_t>(sizes[d], 1);
    return st;
  }
  if (layout == "channels_last") {
    if (nd != 4) usage_error(arg + ": channels_last needs a 4-d (NCHW) array, " + file + " is " + shape_label(sizes));
    return {prod({1, 2, 3}), 1, prod({1, 3}), prod({1})};
  }
  if (layout == "channels_last_3d") {
    if (nd != 5) usage_error(arg + ": channels_last_3d needs a 5-d (NCDHW) array, " + file + " is " + shape_label(sizes));
    return {prod({1, 2, 3, 4}), 1, prod({1, 3, 4}), prod({1, 4}), prod({1})};
  }
  std::vector<int64_t> st;  // strides=S0,S1,...
  const std::string list = layout.substr(8);
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, comma - pos);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < 0)
      usage_error(arg + ": strides must be non-negative integers separated by commas, got '" + item + "'");
    st.push_back(v);
    pos = comma + 1;
  }
  if (st.size() != nd)
    usage_error(arg + ": " + std::to_string(st.size()) + " strides for a " + std::to_string(nd) + "-d array " +
                shape_label(sizes));
  return st;
}

// The model and weights exist, the inputs read (a bad .npy is found before a possibly slow load), the output
// directory made.
std::vector<aoti_host::NpyArray> read_inputs(const Args& args) {
  // A directory is a program of several methods; anything else must be a regular file.
  struct stat model_st {};
  if (::stat(args.model.c_str(), &model_st) != 0 || !S_ISDIR(model_st.st_mode))
    require_file(args.model, "model (.pt2 package, plugin .so or methods.json)");
  if (args.has_weights) require_file(args.weights, "weights blob (--weights)");
  std::vector<aoti_host::NpyArray> arrays;
  arrays.reserve(args.inputs.size());
  for (const auto& path : args.inputs) {
    try {
      arrays.push_back(aoti_host::read_npy(path));
    } catch (const aoti_host::Error& e) {
      throw Failure{kExitBadInput, e.what()};
    }
  }
  make_outdir(args.outdir);
  return arrays;
}

ProgramPtr load_program(const Args& args) {
  aoti_host_load_options options{};
  options.weights_path = args.has_weights ? args.weights.c_str() : nullptr;
  options.device = args.device.c_str();
  aoti_host_program* raw = nullptr;
  const int load_status = aoti_host_program_load(args.model.c_str(), &options, &raw);
  ProgramPtr program(raw);
  if (load_status != AOTI_HOST_OK) {
    // The runtime's messages name the file first; say it once.
    std::string why = last_error_or(load_status);
    if (why.rfind(args.model + ": ", 0) == 0) why.erase(0, args.model.size() + 2);
    throw Failure{exit_code_for_status(load_status), "cannot load " + args.model + ": " + why};
  }
  if (!program)
    throw Failure{exit_code_for_status(AOTI_HOST_INVALID_PROGRAM),
                  "cannot load " + args.model + ": the runtime returned no program"};
  if (args.cuda_graphs) {
    int st = aoti_host_program_set_cuda_graphs(program.get(), true);
    // Every output is written (or freed) before the next run: the graph's own output memory serves.
    if (st == AOTI_HOST_OK) st = aoti_host_program_set_borrowed_graph_outputs(program.get(), true);
    if (st != AOTI_HOST_OK) throw Failure{exit_code_for_status(st), args.model + ": --cuda-graphs: " + last_error_or(st)};
  }
  return program;
}

struct Selected {
  size_t method = 0;
  size_t num_outputs = 0;
};

// The method --method names (else method 0), checked to take the inputs given, with --strict and the inputs'
// layouts set on it.
Selected select_method(aoti_host_program* program, const Args& args, const std::vector<aoti_host::NpyArray>& arrays) {
  Selected sel;
  if (!args.method.empty()) {
    const int found = aoti_host_program_find_method(program, args.method.c_str(), &sel.method);
    if (found != AOTI_HOST_OK) throw Failure{kExitUsage, last_error_or(found) + "; choose one with --method"};
  }
  size_t num_inputs = 0;
  int status = aoti_host_program_method_num_inputs(program, sel.method, &num_inputs);
  if (status != AOTI_HOST_OK) throw Failure{kExitFailed, args.model + ": cannot count inputs: " + last_error_or(status)};
  status = aoti_host_program_method_num_outputs(program, sel.method, &sel.num_outputs);
  if (status != AOTI_HOST_OK) throw Failure{kExitFailed, args.model + ": cannot count outputs: " + last_error_or(status)};
  if (num_inputs != arrays.size()) {
    std::string given;
    for (const auto& p : args.inputs) given += (given.empty() ? "-i " : " -i ") + p;
    if (given.empty()) given = "no -i given";
    throw Failure{kExitBadInput, "the model takes " + std::to_string(num_inputs) +
                                 (num_inputs == 1 ? " input" : " inputs") + ", got " + std::to_string(arrays.size()) +
                                 " (" + given + "); give one -i FILE.npy per input, in order"};
  }
  if (args.strict) {
    status = aoti_host_program_set_strict(program, true);
    if (status != AOTI_HOST_OK) throw Failure{exit_code_for_status(status), "--strict: " + last_error_or(status)};
  }
  for (size_t k = 0; k < arrays.size(); ++k) {
    if (args.layouts[k].empty()) continue;
    const std::vector<int64_t> st = layout_strides(args.layouts[k], args.inputs[k], arrays[k].sizes);
    status = aoti_host_program_set_input_layout(program, sel.method, k, st.data(), static_cast<int32_t>(st.size()));
    if (status != AOTI_HOST_OK) throw Failure{exit_code_for_status(status), last_error_or(status)};
  }
  return sel;
}

// Views of the arrays; with --device-inputs, of their device copies (kept in device_copies).
std::vector<aoti_host_tensor_view> input_views(const Args& args, std::vector<aoti_host::NpyArray>& arrays,
                                               Outputs& device_copies) {
  std::vector<aoti_host_tensor_view> views(arrays.size());
  for (size_t k = 0; k < arrays.size(); ++k) {
    auto& a = arrays[k];
    views[k].data = a.data.empty() ? nullptr : a.data.data();
    views[k].dtype = a.dtype;
    views[k].ndim = static_cast<int32_t>(a.sizes.size());
    views[k].sizes = a.sizes.data();
    views[k].strides = a.strides.data();
    views[k].device_type = 0;
    views[k].device_index = 0;
  }
  if (!args.device_inputs) return views;
  const int32_t index = args.device_name.index;
  for (size_t k = 0; k < views.size(); ++k) {
    AtenTensorHandle host = nullptr;
    if (aoti_torch_create_tensor_from_blob(views[k].data, views[k].ndim, views[k].sizes, views[k].strides, 0,
                                           views[k].dtype, 0, 0, &host) != 0)
      throw Failure{kExitBadInput, "input " + std::to_string(k) + ": " + last_error_or(AOTI_HOST_INVALID_ARGUMENT)};
    Outputs host_keep(1);
    host_keep.data()[0] = host;
    const int st = aoti_host_tensor_to_cuda(host, index, &device_copies.data()[k]);
    if (st != AOTI_HOST_OK) throw Failure{exit_code_for_status(st), "--device-inputs: " + last_error_or(st)};
    void* dptr = nullptr;
    check_shim(aoti_torch_get_data_ptr(device_copies[k], &dptr), "aoti_torch_get_data_ptr", k);
    views[k].data = dptr;
    views[k].device_type = 1;
    views[k].device_index = index;
  }
  return views;
}

// --warmup untimed runs, then --repeat timed ones (each until the device is done); prints their latency.
void time_runs(aoti_host_program* program, const Args& args, const Selected& sel,
               const std::vector<aoti_host_tensor_view>& views) {
  for (long long r = 0; args.repeat > 0 && r < args.warmup; ++r) {
    Outputs outputs(sel.num_outputs);
    run_once(program, sel.method, args.model, views, outputs);
    outputs.reset();
    aoti_host_program_synchronize(program);
  }
  if (args.repeat <= 0) return;
  std::vector<double> us;
  us.reserve(static_cast<size_t>(args.repeat));
  for (long long r = 0; r < args.repeat; ++r) {
    Outputs outputs(sel.num_outputs);
    const auto t0 = std::chrono::steady_clock::now();
    run_once(program, sel.method, args.model, views, outputs);
    outputs.reset();
    aoti_host_program_synchronize(program);  // per call: until the device is done
    const auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("latency_us: median=%.1f p10=%.1f p90=%.1f n=%lld\n", percentile(us, 0.5), percentile(us, 0.1),
              percentile(us, 0.9), args.repeat);
  std::fflush(stdout);
}

void print_cuda_stats(const aoti_host_program* program) {
  aoti_host_cuda_stats st{};
  if (aoti_host_program_cuda_stats(program, &st) != AOTI_HOST_OK) return;
  std::printf("cuda_graphs: captures=%llu replays=%llu eager_runs=%llu input_copies=%llu output_copies=%llu%s%s\n",
              static_cast<unsigned long long>(st.graph_captures), static_cast<unsigned long long>(st.graph_replays),
              static_cast<unsigned long long>(st.eager_runs), static_cast<unsigned long long>(st.graph_input_copies),
              static_cast<unsigned long long>(st.graph_output_copies), *st.graphs_disabled_reason ? " off: " : "",
              st.graphs_disabled_reason);
  std::fflush(stdout);
}

int run(const Args& args) {
  std::vector<aoti_host::NpyArray> arrays = read_inputs(args);
  ProgramPtr program = load_program(args);
  const Selected sel = select_method(program.get(), args, arrays);
  Outputs device_copies(args.device_inputs ? arrays.size() : 0);
  const std::vector<aoti_host_tensor_view> views = input_views(args, arrays, device_copies);
  {
    Outputs outputs(sel.num_outputs);
    run_once(program.get(), sel.method, args.model, views, outputs);
    const std::vector<std::string> stems = output_stems(program.get(), sel.method, outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (outputs[k] == nullptr) {
        throw Failure{kExitRunFailed, args.model + ": the run returned no tensor for output_" + stems[k]};
      }
      write_output(outputs[k], k, stems[k], args.outdir, args.quiet);
    }
  }
  std::fflush(stdout);
  time_runs(program.get(), args, sel, views);
  if (args.cuda_graphs) print_cuda_stats(program.get());
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    if (args.help) {
      std::printf("%s\n%s%s", kUsageLine, kHelp, aoti_host::kAotiRunExitHelp);
      return kExitOk;
    }
    if (args.version) {
      // Same two lines as `aoti-toolchain --version` (it reads them from the runtime's manifest.json).
      std::printf("aoti-run %s\nruntime: %s\n", AOTI_HOST_VERSION, AOTI_HOST_BUILD_CONFIG);
      return kExitOk;
    }
    return run(args);
  } catch (const Failure& f) {
    remove_created_dirs();
    std::fflush(stdout);
    std::fprintf(stderr, "aoti-run: %s\n", f.message.c_str());
    return f.code;
  } catch (const std::bad_alloc&) {
    remove_created_dirs();
    std::fprintf(stderr, "aoti-run: out of memory; free memory or use smaller inputs\n");
    return kExitFailed;
  } catch (const std::exception& e) {
    remove_created_dirs();
    std::fprintf(stderr, "aoti-run: unexpected error: %s; please report it with the command line\n", e.what());
    return kExitFailed;
  } catch (...) {
    std::fprintf(stderr, "aoti-run: unexpected error (unknown exception); please report it with the command line\n");
    return kExitFailed;
  }
}
