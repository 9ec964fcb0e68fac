// kiln-onnx: ONNX models from the command line.
//
//   kiln-onnx info MODEL    opset, inputs and outputs (dtypes, dims with
//                           their symbolic names), initializers, op counts,
//                           and everything kiln cannot import, all at once
//                           (exit 1 if anything)
//   kiln-onnx run MODEL --data DIR [--out DIR] [--threads T] [--thread-plan P]
//                 [--rtol R] [--atol A]
//                           feeds DIR/input_N.pb (ONNX's data-set layout: one
//                           TensorProto per graph input, in order), runs the
//                           model; when DIR holds output_N.pb, compares
//                           (|got - want| <= atol + rtol·|want|; by default
//                           ONNX's backend-test tolerances, rtol 1e-3 and atol
//                           1e-7, which a deep f32 network's outputs near zero
//                           can miss by rounding alone), prints each output's
//                           max abs and rel error, exit 1 on a mismatch; --out
//                           writes the outputs as output_N.pb
//   kiln-onnx bench MODEL [--dim NAME=N]... [--threads T] [--iters N]
//                     [--int-max N] [--name BENCH_NAME] [--thread-plan P]
//                     [--precision f32|bf16]
//                           random inputs of the declared shapes (symbolic
//                           dims from --dim; integers in [0, int-max), 10 by
//                           default), warm-up, then latency p50/p90/p99 and
//                           throughput; --name also prints
//                           "BENCH <name> <p50> ms" and "BENCH <name>.min <min> ms"
//                           (./run bench's format);
//                           --trace FILE writes the last run as a Chrome trace;
//                           --thread-plan auto|sequential|graph|blas sets
//                           ExecutionOptions::thread_plan (the plan the run
//                           kept is printed); --precision bf16 runs the
//                           convolutions and matmuls in bf16 (mixed
//                           precision O1, kiln/frontend/amp.h; default f32)
//   kiln-onnx export PROGRAM WEIGHTS OUT.onnx [--feed NAME]... [--fetch NAME]...
//                           a kiln program (JSON, kiln/io/json.h) and its
//                           weights file (kiln/io/weights.h) — e.g. what
//                           save_inference_model writes — as an ONNX model
//                           (kiln/onnx/export.h). --feed names kiln.data ops
//                           (default: every one, in program order), --fetch
//                           kiln.fetch ops (default: every one); both repeat.
//
// Exit status: 0; 1 with the error on stderr (a file that cannot be read, a
// model kiln cannot import, data that does not fit the model, an unknown
// feed or fetch, an op with no ONNX equivalent, an output that cannot be
// written) or on a mismatch; 2 for a bad command line.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/exec/executor.h"
#include "kiln/exec/interpreter_core.h"
#include "kiln/frontend/amp.h"
#include "kiln/io/file.h"
#include "kiln/io/json.h"
#include "kiln/io/weights.h"
#include "kiln/onnx/export.h"
#include "kiln/onnx/import.h"
#include "kiln/onnx/model_info.h"
#include "kiln/onnx/test_data.h"
#include "kiln/support/error.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

int usage() {
  std::fputs(
      "usage: kiln-onnx info MODEL\n"
      "       kiln-onnx run MODEL --data DIR [--out DIR] [--threads T] [--thread-plan P]\n"
      "                           [--rtol R] [--atol A]\n"
      "       kiln-onnx bench MODEL [--dim NAME=N]... [--threads T] [--iters N] [--int-max N]\n"
      "                             [--name BENCH_NAME] [--trace FILE] [--thread-plan P]\n"
      "                             [--precision f32|bf16]\n"
      "       kiln-onnx export PROGRAM WEIGHTS OUT.onnx [--feed NAME]... [--fetch NAME]...\n",
      stderr);
  return 2;
}

struct Args {
  std::string model;
  std::map<std::string, std::vector<std::string>> options;  // "--dim" → its values
  std::string one(const std::string& key, const std::string& fallback = "") const {
    auto it = options.find(key);
    return it == options.end() ? fallback : it->second.back();
  }
};

// MODEL then --key value pairs; false on anything else.
bool parse_args(int argc, char** argv, const std::vector<std::string>& keys, Args& a) {
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      if (std::find(keys.begin(), keys.end(), s) == keys.end() || i + 1 >= argc) return false;
      a.options[s].push_back(argv[++i]);
    } else if (a.model.empty()) {
      a.model = s;
    } else {
      return false;
    }
  }
  return !a.model.empty();
}

unsigned positive(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1 || v > 1 << 20)
    throw_error(ErrorKind::InvalidArgument, what, " '", text, "' is not a positive integer");
  return static_cast<unsigned>(v);
}

// A tolerance: a finite number >= 0.
double tolerance(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0' || !(v >= 0) ||
      v == HUGE_VAL)
    throw_error(ErrorKind::InvalidArgument, what, " '", text, "' is not a number >= 0");
  return v;
}

ThreadPlan thread_plan(const std::string& text) {
  for (ThreadPlan p : {ThreadPlan::Auto, ThreadPlan::Sequential, ThreadPlan::Graph, ThreadPlan::Blas})
    if (text == to_string(p)) return p;
  throw_error(ErrorKind::InvalidArgument, "--thread-plan '", text,
              "' is not one of auto, sequential, graph, blas");
}

Executor make_executor(const Args& a) {
  ExecutionOptions opt;
  opt.profile = !a.one("--trace").empty();
  opt.num_threads = positive(a.one("--threads", "1"), "--threads");
  opt.thread_plan = thread_plan(a.one("--thread-plan", "auto"));
  return Executor(Place::cpu(), opt);
}

std::string dims_text(const onnx::TensorInfo& in) {
  std::string s;
  for (std::size_t k = 0; k < in.dims.size(); ++k) {
    if (k) s += ", ";
    s += in.dims[k] >= 0 ? std::to_string(in.dims[k])
                         : (in.dim_params[k].empty() ? "?" : in.dim_params[k]);
  }
  return in.elem_type + " [" + s + "]";
}

// kiln::Error naming the file and the graph input when `t` cannot be fed as `in`.
void check_fits(const Tensor& t, const onnx::TensorInfo& in, const fs::path& file) {
  const auto kind = onnx::data_type_of(in);
  bool fits = kind && *kind == t.dtype();
  if (fits && in.has_shape) {
    const auto dims = t.dims().to_vector();
    fits = dims.size() == in.dims.size();
    for (std::size_t k = 0; fits && k < dims.size(); ++k)
      fits = in.dims[k] < 0 || in.dims[k] == dims[k];
  }
  if (!fits)
    throw_error(ErrorKind::InvalidArgument, "data file '", file.string(), "' holds ",
                to_string(t.dtype()), " [", t.dims().to_string(), "]; graph input '", in.name,
                "' takes ", dims_text(in));
}

int run_model(const Args& a) {
  if (a.one("--data").empty()) return usage();
  const fs::path data = a.one("--data");
  const double rtol = a.options.count("--rtol") ? tolerance(a.one("--rtol"), "--rtol") : onnx::kOnnxRtol;
  const double atol = a.options.count("--atol") ? tolerance(a.one("--atol"), "--atol") : onnx::kOnnxAtol;
  if (!fs::is_directory(data))
    throw_error(ErrorKind::NotFound, "data folder '", data.string(), "' does not exist");
  onnx::ImportedModel m = onnx::import_model(a.model);
  const onnx::ModelInfo& info = m.info;
  const auto inputs = onnx::numbered_entries(data, "input_");
  if (inputs.size() != m.inputs.size())
    throw_error(ErrorKind::InvalidArgument, "data folder '", data.string(), "' holds ",
                inputs.size(), " input_N.pb files; the model has ", m.inputs.size(),
                " graph inputs");
  FeedMap feed;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = onnx::as_declared(onnx::read_tensor_proto(inputs[i].string()),
                                 onnx::data_type_of(info.inputs[i]).value_or(DataType::Undefined));
    check_fits(t, info.inputs[i], inputs[i]);
    feed[m.inputs[i]] = std::move(t);
  }
  Executor exe = make_executor(a);
  exe.run(m.startup);
  exe.evict(m.startup);  // the weights stay once, in the scope
  m.startup = {};
  const auto got = exe.run(m.main, feed, std::vector<FetchTarget>(m.outputs.begin(), m.outputs.end()));
  const auto expected = onnx::numbered_entries(data, "output_");
  if (!expected.empty()) std::printf("comparing within rtol %g, atol %g\n", rtol, atol);
  int rc = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    std::printf("output %s: %s [%s]", m.outputs[k].c_str(), std::string(to_string(got[k].dtype())).c_str(),
                got[k].dims().to_string().c_str());
    if (k < expected.size()) {
      const auto c = onnx::compare_tensors(
          got[k], onnx::as_declared(onnx::read_tensor_proto(expected[k].string()), got[k].dtype()), rtol,
          atol);
      std::printf("  max abs error %.3g, max rel error %.3g: %s", c.max_abs, c.max_rel,
                  c.matches ? "matches" : ("MISMATCH (" + std::to_string(c.mismatched) +
                                           " elements; " + c.first + ")").c_str());
      if (!c.matches) rc = 1;
    }
    std::printf("\n");
  }
  if (!a.one("--out").empty()) {
    const fs::path out = a.one("--out");
    std::error_code ec;
    fs::create_directories(out, ec);
    for (std::size_t k = 0; k < got.size(); ++k)
      onnx::write_tensor_proto(got[k], m.outputs[k], (out / ("output_" + std::to_string(k) + ".pb")).string());
  }
  return rc;
}

Tensor random_input(const onnx::TensorInfo& in, const std::map<std::string, std::int64_t>& dims_by_name,
                    std::int64_t int_max, std::mt19937_64& rng) {
  if (!in.has_shape)
    throw_error(ErrorKind::InvalidArgument, "graph input '", in.name, "' declares no shape");
  std::vector<std::int64_t> dims;
  for (std::size_t k = 0; k < in.dims.size(); ++k) {
    if (in.dims[k] >= 0) { dims.push_back(in.dims[k]); continue; }
    auto d = dims_by_name.find(in.dim_params[k]);
    if (d == dims_by_name.end())
      throw_error(ErrorKind::InvalidArgument, "graph input '", in.name, "' has the symbolic dim '",
                  in.dim_params[k], "' (#", k, "): give it with --dim ",
                  in.dim_params[k].empty() ? "NAME" : in.dim_params[k], "=N");
    dims.push_back(d->second);
  }
  auto fill = [&](auto tag, auto draw) {
    using T = decltype(tag);
    Tensor t = Tensor::empty(Dims(dims), DataTypeOf<T>::value);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(draw());
    return t;
  };
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<std::int64_t> integer(0, int_max - 1);
  if (in.elem_type == "float") return fill(float(), [&] { return real(rng); });
  if (in.elem_type == "double") return fill(double(), [&] { return real(rng); });
  if (in.elem_type == "int32") return fill(std::int32_t(), [&] { return integer(rng); });
  if (in.elem_type == "int64") return fill(std::int64_t(), [&] { return integer(rng); });
  if (in.elem_type == "uint8") return fill(std::uint8_t(), [&] { return integer(rng) & 0xff; });
  if (in.elem_type == "int8") return fill(std::int8_t(), [&] { return integer(rng) & 0x7f; });
  if (in.elem_type == "bool") return fill(bool(), [&] { return rng() & 1; });
  throw_error(ErrorKind::Unimplemented, "graph input '", in.name, "' has element type ",
              in.elem_type,
              "; kiln-onnx bench makes float, double, int32, int64, uint8, int8 and bool inputs");
}

// --precision: f32 runs the program as imported; bf16 rewrites it as mixed
// precision O1 (kiln/frontend/amp.h) with its convolutions and matmuls in
// bf16 and norms, softmax and reductions in f32 (fast where the CPU
// computes bf16 natively), and bench_model then rounds the weights those
// read to bf16 once (amp::cast_parameters). The ops made bf16; kiln::Error
// for another value.
std::size_t lower_precision(Program& main, const std::string& precision) {
  if (precision == "f32") return 0;
  if (precision != "bf16")
    throw_error(ErrorKind::InvalidArgument, "--precision '", precision, "' is not f32 or bf16");
  amp::Options o;
  o.dtype = DataType::BFloat16;
  o.allow = {"kiln.conv2d", "kiln.fused_conv2d", "kiln.matmul"};
  const amp::RewriteResult r = amp::rewrite(main.block(), o);
  return r.lowered_ops;
}

int bench_model(const Args& a) {
  std::map<std::string, std::int64_t> dims_by_name;
  if (auto d = a.options.find("--dim"); d != a.options.end())
    for (const auto& s : d->second) {
      const auto eq = s.find('=');
      if (eq == std::string::npos || eq == 0)
        throw_error(ErrorKind::InvalidArgument, "--dim '", s, "' is not NAME=N");
      dims_by_name[s.substr(0, eq)] = positive(s.substr(eq + 1), "--dim " + s.substr(0, eq));
    }
  const unsigned iters = positive(a.one("--iters", "200"), "--iters");
  const std::int64_t int_max = positive(a.one("--int-max", "10"), "--int-max");
  const auto t0 = std::chrono::steady_clock::now();
  onnx::ImportedModel m = onnx::import_model(a.model);
  const onnx::ModelInfo& info = m.info;
  const std::string precision = a.one("--precision", "f32");
  const std::size_t lowered = lower_precision(m.main, precision);
  Executor exe = make_executor(a);
  exe.run(m.startup);
  exe.evict(m.startup);  // the weights stay once, in the scope
  m.startup = {};
  // An inference program: its weights rounded to bf16 once, not cast every run.
  if (precision == "bf16") amp::cast_parameters(m.main, exe.scope(), DataType::BFloat16);
  std::mt19937_64 rng(7);
  FeedMap feed;
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    feed[m.inputs[i]] = random_input(info.inputs[i], dims_by_name, int_max, rng);
  const std::vector<FetchTarget> fetch(m.outputs.begin(), m.outputs.end());
  exe.run(m.main, feed, fetch);  // the plan is built here
  const double import_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Warm-up, and until the Auto thread plan has timed its candidates: the
  // timed runs all run the kept plan.
  for (unsigned i = 0; i < std::max(5u, iters / 10) || (i < 200 && !exe.last_core()->thread_plan_decided());
       ++i)
    exe.run(m.main, feed, fetch);
  std::vector<double> ms;
  for (unsigned i = 0; i < iters; ++i) {
    const auto s = std::chrono::steady_clock::now();
    exe.run(m.main, feed, fetch);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(ms.begin(), ms.end());
  if (const std::string trace = a.one("--trace"); !trace.empty())
    write_file_atomic(trace, exe.last_core()->chrome_trace(), "Chrome trace");
  auto pct = [&](double p) { return ms[std::min(ms.size() - 1, static_cast<std::size_t>(p * ms.size()))]; };
  std::int64_t batch = 1;
  if (!m.inputs.empty() && feed.at(m.inputs[0]).rank() > 0) batch = feed.at(m.inputs[0]).dims()[0];
  std::printf("%s: %u runs, threads %s, thread plan %s, precision %s", a.model.c_str(), iters,
              a.one("--threads", "1").c_str(), std::string(to_string(exe.last_core()->thread_plan())).c_str(),
              precision.c_str());
  if (precision != "f32") std::printf(" (%zu ops in it)", lowered);
  std::printf("\n");
  std::printf("import + first run: %.3f ms\n", import_ms);
  std::printf("latency ms: p50 %.4f  p90 %.4f  p99 %.4f  min %.4f\n", pct(0.5), pct(0.9), pct(0.99), ms[0]);
  std::printf("throughput: %.1f runs/s, %.1f samples/s (batch %lld)\n", 1e3 / pct(0.5),
              1e3 * static_cast<double>(batch) / pct(0.5), static_cast<long long>(batch));
  if (const std::string name = a.one("--name"); !name.empty()) {
    std::printf("BENCH %s %.4f ms\n", name.c_str(), pct(0.5));
    std::printf("BENCH %s.min %.4f ms\n", name.c_str(), ms[0]);
    std::printf("BENCH %s.import_ms %.3f ms\n", name.c_str(), import_ms);
  }
  return 0;
}

int export_command(int argc, char** argv) {
  std::vector<std::string> positional, feeds;
  std::vector<FetchTarget> fetches;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--feed" || a == "--fetch") {
      if (i + 1 >= argc) return usage();
      if (a == "--feed") feeds.emplace_back(argv[++i]);
      else fetches.emplace_back(std::string(argv[++i]));
    } else if (a.rfind("--", 0) == 0) {
      return usage();
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 3) return usage();
  const Program program = load_program_file(positional[0]);
  Scope scope;
  load_weights(positional[1], scope, program);
  const bool all_feeds = feeds.empty(), all_fetches = fetches.empty();
  for (Operation* op = program.block().front(); op; op = op->next_in_block()) {
    if (auto d = DataOp::dyn_cast(op); d && all_feeds) feeds.push_back(d.attrs().name);
    if (auto f = FetchOp::dyn_cast(op); f && all_fetches) fetches.emplace_back(f.attrs().name);
  }
  onnx::export_model(program, scope, feeds, fetches, positional[2]);
  std::printf("wrote %s (%zu inputs, %zu outputs)\n", positional[2].c_str(), feeds.size(),
              fetches.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  try {
    if (cmd == "info" && argc == 3) {
      kiln::onnx::ModelInfo info;
      const auto problems = kiln::onnx::import_problems(argv[2], &info);
      std::fputs(kiln::onnx::to_string(info).c_str(), stdout);
      if (problems.empty()) {
        std::puts("kiln imports every node");
        return 0;
      }
      std::printf("kiln cannot import (%zu):\n", problems.size());
      for (const auto& p : problems) std::printf("  %s\n", p.c_str());
      return 1;
    }
    Args a;
    if (cmd == "run" &&
        parse_args(argc, argv, {"--data", "--out", "--threads", "--thread-plan", "--rtol", "--atol"}, a))
      return run_model(a);
    if (cmd == "bench" &&
        parse_args(argc, argv, {"--dim", "--threads", "--thread-plan", "--iters", "--int-max", "--name",
                                     "--trace", "--precision"}, a))
      return bench_model(a);
    if (cmd == "export") return export_command(argc, argv);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-onnx %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  return usage();
}
